"""Structured output through each adapter's real SDK against the scripted server.

For each provider: the exact request body (format field, strict schema), the parsed object,
one re-ask then a typed failure for invalid JSON and for a schema violation, and refusal
and truncation typed.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from typing import Any

import pytest
from provider_server import FakeProvider, Reply, error
from provider_wire import a_message, a_text, c_completion, c_sse, r_response, r_text
from pydantic import BaseModel

from tether.clients import ChatClient, ChatOptions, ResponseDone
from tether.errors import ProviderError, StructuredOutputError
from tether.messages import Message
from tether.providers.anthropic import AnthropicClient
from tether.providers.openai_chat import OpenAIChatClient
from tether.providers.openai_responses import OpenAIResponsesClient
from tether.structured import extract, output_schema


class Motif(enum.Enum):
    SUIVI = "Suivi"
    REMBOURSEMENT = "Remboursement"
    AUTRE = "Autre"


class Tri(BaseModel):
    """Le tri d'un ticket."""

    motif: Motif
    urgent: bool = False


INSTRUCTIONS = "Classe le ticket : Suivi, Remboursement ou Autre."
TICKET = "Je n'ai toujours pas recu ma commande C-1042."
MOTIF_DEF = {"enum": ["Suivi", "Remboursement", "Autre"], "title": "Motif", "type": "string"}

# The strict schema OpenAI is sent (Responses and Chat): closed, every property required,
# the optional one nullable with its default dropped.
OPENAI_STRICT = {
    "$defs": {"Motif": MOTIF_DEF},
    "description": "Le tri d'un ticket.",
    "properties": {
        "motif": {"$ref": "#/$defs/Motif"},
        "urgent": {"title": "Urgent", "type": ["boolean", "null"]},
    },
    "required": ["motif", "urgent"],
    "title": "Tri",
    "type": "object",
    "additionalProperties": False,
}
# The schema Anthropic is sent: closed; constraints it cannot enforce go to descriptions.
ANTHROPIC_SCHEMA = {
    "$defs": {"Motif": {"enum": ["Suivi", "Remboursement", "Autre"], "title": "Motif"}},
    "type": "object",
    "description": "Le tri d'un ticket.",
    "title": "Tri",
    "properties": {
        "motif": {"$ref": "#/$defs/Motif"},
        "urgent": {"type": "boolean", "title": "Urgent", "description": "{default: False}"},
    },
    "additionalProperties": False,
    "required": ["motif"],
}


# --- one provider = a client, a text reply, a refusal, a truncation --------------------------


def _anthropic(server: FakeProvider) -> ChatClient:
    return AnthropicClient(
        "claude-test", api_key="sk-test", base_url=server.url, max_retries=0, cache=False
    )


def _responses(server: FakeProvider) -> ChatClient:
    return OpenAIResponsesClient("gpt-test", api_key="sk-test", base_url=server.url, max_retries=0)


def _chat(server: FakeProvider) -> ChatClient:
    return OpenAIChatClient("local-test", base_url=server.url, max_retries=0)


def _responses_refusal() -> dict[str, Any]:
    refusal = {"type": "refusal", "refusal": "I can't help with that."}
    item = {**r_text(""), "content": [refusal]}
    return r_response(item)


def _chat_refusal() -> dict[str, Any]:
    body = c_completion(None)
    body["choices"][0]["message"]["refusal"] = "I can't help with that."
    return body


PROVIDERS: dict[str, dict[str, Callable[..., Any]]] = {
    "anthropic": {
        "client": _anthropic,
        "text": lambda t: a_message(a_text(t)),
        "refusal": lambda: a_message(a_text("I can't help."), stop="refusal"),
        "truncated": lambda: a_message(a_text('{"motif": "Sui'), stop="max_tokens"),
    },
    "responses": {
        "client": _responses,
        "text": lambda t: r_response(r_text(t)),
        "refusal": _responses_refusal,
        "truncated": lambda: r_response(
            r_text('{"motif": "Sui'), status="incomplete", incomplete="max_output_tokens"
        ),
    },
    "chat": {
        "client": _chat,
        "text": lambda t: c_completion(t),
        "refusal": _chat_refusal,
        "truncated": lambda: c_completion('{"motif": "Sui', finish="length"),
    },
}


def _reask_text(provider: str, body: dict[str, Any]) -> str:
    """The last user text of a request body, in each wire format."""
    if provider == "anthropic":
        return str(body["messages"][-1]["content"][-1]["text"])
    if provider == "responses":
        return str(body["input"][-1]["content"])
    return str(body["messages"][-1]["content"])


# --- the request body, exactly ----------------------------------------------------------------


async def test_anthropic_body_uses_output_config_format(server: FakeProvider) -> None:
    server.script = [Reply(a_message(a_text('{"motif": "Suivi"}')))]
    result = await extract(_anthropic(server), TICKET, Tri, instructions=INSTRUCTIONS)
    assert result.output == Tri(motif=Motif.SUIVI)
    assert result.usage.input_tokens == 10 and result.usage.output_tokens == 5
    (body,) = server.bodies()
    assert body == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": [{"type": "text", "text": INSTRUCTIONS}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": TICKET}]}],
        "output_config": {"format": {"type": "json_schema", "schema": ANTHROPIC_SCHEMA}},
    }


async def test_anthropic_keeps_other_output_config_fields(server: FakeProvider) -> None:
    server.script = [Reply(a_message(a_text('{"motif": "Autre"}')))]
    options = ChatOptions(extra={"output_config": {"effort": "low"}})
    await extract(_anthropic(server), TICKET, Tri, options=options)
    config = server.bodies()[0]["output_config"]
    assert config["effort"] == "low"
    assert config["format"] == {"type": "json_schema", "schema": ANTHROPIC_SCHEMA}


async def test_responses_body_uses_a_strict_text_format(server: FakeProvider) -> None:
    server.script = [Reply(r_response(r_text('{"motif": "Remboursement", "urgent": null}')))]
    result = await extract(_responses(server), TICKET, Tri, instructions=INSTRUCTIONS)
    assert result.output == Tri(motif=Motif.REMBOURSEMENT, urgent=False)  # null -> default
    (body,) = server.bodies()
    assert body == {
        "model": "gpt-test",
        "store": False,
        "instructions": INSTRUCTIONS,
        "input": [{"role": "user", "content": TICKET}],
        "max_output_tokens": 4096,  # extract's default cap
        "text": {
            "format": {
                "type": "json_schema",
                "name": "Tri",
                "description": "Le tri d'un ticket.",
                "schema": OPENAI_STRICT,
                "strict": True,
            }
        },
    }


async def test_responses_schema_that_cannot_be_strict_is_sent_non_strict(
    server: FakeProvider,
) -> None:
    class Line(BaseModel):
        sku: str
        qty: int = 1

    class Order(BaseModel):
        lines: list[Line]

    server.script = [Reply(r_response(r_text('{"lines": [{"sku": "A"}]}')))]
    result = await extract(_responses(server), "x", Order)
    assert result.output.lines[0].qty == 1
    fmt = server.bodies()[0]["text"]["format"]
    assert fmt["strict"] is False and fmt["schema"] == output_schema(Order).schema


async def test_chat_body_uses_response_format_json_schema(server: FakeProvider) -> None:
    server.script = [Reply(c_completion('{"motif": "Autre", "urgent": true}'))]
    result = await extract(_chat(server), TICKET, Tri, instructions=INSTRUCTIONS)
    assert result.output == Tri(motif=Motif.AUTRE, urgent=True)
    (body,) = server.bodies()
    assert body == {
        "model": "local-test",
        "messages": [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": TICKET},
        ],
        "max_tokens": 4096,  # extract's default cap
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "Tri",
                "description": "Le tri d'un ticket.",
                "schema": OPENAI_STRICT,
                "strict": True,
            },
        },
    }


def test_a_literal_is_sent_wrapped_in_an_object() -> None:
    from typing import Literal

    from tether.providers.openai_chat import response_format

    wire = response_format(output_schema(Literal["Suivi", "Autre"]))
    assert wire["json_schema"]["name"] == "output" and wire["json_schema"]["strict"] is True
    assert wire["json_schema"]["schema"]["properties"] == {
        "value": {"enum": ["Suivi", "Autre"], "type": "string"}
    }


# --- bad output: one re-ask, then a typed failure ---------------------------------------------


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_invalid_json_is_reasked_once_then_fails(provider: str, server: FakeProvider) -> None:
    wire = PROVIDERS[provider]
    server.script = [Reply(wire["text"]('{"motif": ')), Reply(wire["text"]("Suivi, I think"))]
    with pytest.raises(StructuredOutputError) as caught:
        await extract(wire["client"](server), TICKET, Tri)
    assert caught.value.kind == "invalid" and caught.value.attempts == 2
    assert caught.value.text == "Suivi, I think"
    bodies = server.bodies()
    assert len(bodies) == 2
    assert "not valid JSON" in _reask_text(provider, bodies[1])


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_a_schema_violation_is_reasked_with_the_errors(
    provider: str, server: FakeProvider
) -> None:
    wire = PROVIDERS[provider]
    server.script = [
        Reply(wire["text"]('{"motif": "Urgent"}')),
        Reply(wire["text"]('{"motif": "Remboursement"}')),
    ]
    result = await extract(wire["client"](server), TICKET, Tri)
    assert result.output.motif is Motif.REMBOURSEMENT and result.attempts == 2
    reask = _reask_text(provider, server.bodies()[1])
    assert "motif: Input should be 'Suivi', 'Remboursement' or 'Autre'" in reask

    server.script = [Reply(wire["text"]('{"motif": 1}')), Reply(wire["text"]('{"urgent": true}'))]
    with pytest.raises(StructuredOutputError) as caught:
        await extract(wire["client"](server), TICKET, Tri)
    assert caught.value.kind == "invalid" and caught.value.problems == ("motif: Field required",)
    assert len(server.bodies()) == 4


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@pytest.mark.parametrize("kind", ["refused", "truncated"])
async def test_refusal_and_truncation_are_typed(
    provider: str, kind: str, server: FakeProvider
) -> None:
    wire = PROVIDERS[provider]
    server.script = [Reply(wire["refusal" if kind == "refused" else "truncated"]())]
    with pytest.raises(StructuredOutputError) as caught:
        await extract(wire["client"](server), TICKET, Tri)
    assert caught.value.kind == kind and caught.value.attempts == 1
    assert len(server.bodies()) == 1  # never re-asked


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_context_overflow_is_typed(provider: str, server: FakeProvider) -> None:
    body = {"error": {"type": "invalid_request_error", "message": "prompt is too long"}}
    if provider != "anthropic":
        body = {"error": {"message": "too long", "type": "x", "code": "context_length_exceeded"}}
    server.script = [error(400, body)]
    with pytest.raises(StructuredOutputError) as caught:
        await extract(PROVIDERS[provider]["client"](server), TICKET, Tri)
    assert caught.value.kind == "context_exceeded"


# --- Chat Completions servers without json_schema -------------------------------------------

LLAMA_CPP_REJECTION = {
    "error": {
        "code": 400,
        "message": 'response_format type must be one of "text" or "json_object", '
        "but got: json_schema",
        "type": "invalid_request_error",
    }
}


async def test_chat_falls_back_to_json_mode_on_a_clear_rejection(server: FakeProvider) -> None:
    server.script = [
        error(400, LLAMA_CPP_REJECTION),
        Reply(c_completion('{"motif": "Suivi"}')),
        Reply(c_completion('{"motif": "Autre"}')),
    ]
    client = OpenAIChatClient("local-test", base_url=server.url, max_retries=0)
    result = await extract(client, TICKET, Tri, instructions=INSTRUCTIONS)
    assert result.output.motif is Motif.SUIVI and client.output_mode == "json_object"
    first, second = server.bodies()[:2]
    assert first["response_format"]["type"] == "json_schema"
    assert second["response_format"] == {"type": "json_object"}
    system = second["messages"][0]["content"]
    assert system.startswith(INSTRUCTIONS + "\n\nReply with one JSON object valid against")
    assert json.loads(system.splitlines()[-1]) == output_schema(Tri).schema
    # later requests go straight to JSON mode
    await extract(client, TICKET, Tri)
    assert server.bodies()[2]["response_format"] == {"type": "json_object"}
    assert len(server.bodies()) == 3


async def test_chat_stream_falls_back_too(server: FakeProvider) -> None:
    server.script = [error(400, LLAMA_CPP_REJECTION), c_sse(c_completion('{"motif": "Suivi"}'))]
    client = OpenAIChatClient("local-test", base_url=server.url, max_retries=0)
    options = ChatOptions(output_schema=output_schema(Tri))
    chunks = [c async for c in client.stream([Message.user(TICKET)], (), options)]
    done = chunks[-1]
    assert isinstance(done, ResponseDone) and done.response.message.text == '{"motif": "Suivi"}'
    second = server.bodies()[1]
    assert second["response_format"] == {"type": "json_object"}
    assert second["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    "message",
    [
        "Invalid schema for response_format 'Tri': 'required' is required",  # schema error
        "model not found",  # not about the format
    ],
)
async def test_other_bad_requests_do_not_fall_back(server: FakeProvider, message: str) -> None:
    server.script = [error(400, {"error": {"message": message, "type": "invalid_request_error"}})]
    client = OpenAIChatClient("local-test", base_url=server.url, max_retries=0)
    with pytest.raises(ProviderError) as caught:
        await extract(client, TICKET, Tri)
    assert caught.value.kind == "bad_request" and client.output_mode == "auto"
    assert len(server.bodies()) == 1


async def test_chat_json_schema_mode_never_falls_back(server: FakeProvider) -> None:
    server.script = [error(400, LLAMA_CPP_REJECTION)]
    client = OpenAIChatClient(
        "local-test", base_url=server.url, max_retries=0, output_mode="json_schema"
    )
    with pytest.raises(ProviderError):
        await extract(client, TICKET, Tri)
    assert len(server.bodies()) == 1


# --- an agent's typed final answer, tools included --------------------------------------------


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_an_agent_asks_for_its_output_type_alongside_its_tools(
    provider: str, server: FakeProvider
) -> None:
    from provider_tools import read_order

    from tether.loop import Agent

    wire = PROVIDERS[provider]
    server.script = [Reply(wire["text"]('{"motif": "Suivi", "urgent": true}'))]
    agent = Agent(wire["client"](server), [read_order], output_type=Tri)
    result = await agent.run(TICKET)
    assert result.output == Tri(motif=Motif.SUIVI, urgent=True)
    (body,) = server.bodies()
    assert len(body["tools"]) == 1
    if provider == "anthropic":
        assert body["output_config"]["format"]["schema"] == ANTHROPIC_SCHEMA
    elif provider == "responses":
        assert body["text"]["format"]["schema"] == OPENAI_STRICT
    else:
        assert body["response_format"]["json_schema"]["schema"] == OPENAI_STRICT
