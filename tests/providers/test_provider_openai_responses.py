"""The OpenAI Responses adapter through the real SDK against a scripted server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from provider_server import FakeProvider, Reply, error
from provider_tools import convert, read_order
from provider_wire import r_call, r_response, r_sse, r_text

from tether.clients import ChatOptions, ResponseDone, TextDelta
from tether.errors import ContextWindowExceeded, ProviderError
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message, ToolCall, ToolResult
from tether.providers.openai_responses import OpenAIResponsesClient, tool_to_wire
from tether.tools import ToolSpec


def client(server: FakeProvider, **kwargs: Any) -> OpenAIResponsesClient:
    kwargs.setdefault("max_retries", 0)
    return OpenAIResponsesClient("gpt-test", api_key="sk-test", base_url=server.url, **kwargs)


def oai_error(message: str, type: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": None, "code": code}}


# --- request mapping ------------------------------------------------------------------------


def test_tools_are_strict_when_the_schema_allows() -> None:
    wire, nullable = tool_to_wire(read_order.spec)
    assert wire["type"] == "function" and wire["strict"] is True
    assert wire["parameters"]["additionalProperties"] is False
    assert wire["parameters"]["required"] == ["numero"] and not nullable

    wire, nullable = tool_to_wire(convert.spec)  # `currency` is optional
    assert wire["strict"] is True and nullable == {"currency"}
    currency = wire["parameters"]["properties"]["currency"]
    assert currency["type"] == ["string", "null"] and "default" not in currency
    assert wire["parameters"]["required"] == ["amount", "currency"]

    open_object = ToolSpec(
        "tag",
        "Tag things.",
        {"type": "object", "properties": {"labels": {"type": "object"}}, "required": ["labels"]},
    )
    wire, _ = tool_to_wire(open_object)
    assert wire["strict"] is False and wire["parameters"] == open_object.parameters
    assert tool_to_wire(read_order.spec, try_strict=False)[0]["strict"] is False


def test_history_becomes_items_and_instructions_stay_apart() -> None:
    c = OpenAIResponsesClient("gpt-test", api_key="k")
    history = [
        Message.user("two orders"),
        Message.assistant(
            "Looking.",
            ToolCall("c1", "lire_commande", {"numero": "C-1042"}),
            ToolCall("c2", "lire_commande", {}, raw_arguments='{"numero": '),
        ),
        Message.results([ToolResult("c1", "ok"), ToolResult("c2", "bad JSON", is_error=True)]),
    ]
    body = c.request_body(history, [read_order.spec], ChatOptions("Be brief.", 300, 0.2))
    assert body["store"] is False and body["instructions"] == "Be brief."
    assert (body["max_output_tokens"], body["temperature"]) == (300, 0.2)
    assert body["input"] == [
        {"role": "user", "content": "two orders"},
        {"role": "assistant", "content": "Looking."},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "lire_commande",
            "arguments": '{"numero":"C-1042"}',
        },
        {
            "type": "function_call",
            "call_id": "c2",
            "name": "lire_commande",
            "arguments": '{"numero": ',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "function_call_output", "call_id": "c2", "output": "bad JSON"},
    ]


async def test_null_for_an_optional_parameter_is_dropped(server: FakeProvider) -> None:
    server.script = [Reply(r_response(r_call("c1", "convert", {"amount": 5, "currency": None})))]
    reply = await client(server).complete([Message.user("q")], [convert.spec], ChatOptions())
    assert reply.message.tool_calls == [ToolCall("c1", "convert", {"amount": 5})]


async def test_malformed_arguments_keep_their_text_and_reach_the_model_as_an_error(
    server: FakeProvider,
) -> None:
    server.script = [
        Reply(r_response(r_call("c1", "lire_commande", '{"numero": "C-10'))),
        Reply(r_response(r_text("Sorry."))),
    ]
    result = await Agent(client(server), [read_order]).run("q")
    call = result.transcript[1].tool_calls[0]
    assert call.malformed and call.raw_arguments == '{"numero": "C-10'
    second = server.bodies()[1]["input"]
    assert second[1]["arguments"] == '{"numero": "C-10'
    assert second[2]["type"] == "function_call_output" and second[2]["call_id"] == "c1"
    assert result.outcome.kind == "completed"


# --- stop reasons ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "value", "raw", "outcome"),
    [
        (r_response(r_text("fine")), "stop", "completed", "completed"),
        (
            r_response(r_text("cut"), status="incomplete", incomplete="max_output_tokens"),
            "max_tokens",
            "max_output_tokens",
            "truncated",
        ),
        (
            r_response(r_text("hmm"), status="incomplete", incomplete="content_filter"),
            "content_filter",
            "content_filter",
            "refused",
        ),
        (
            r_response(
                {
                    "type": "message",
                    "id": "m",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "refusal", "refusal": "I can't help with that."}],
                }
            ),
            "refusal",
            "refusal",
            "refused",
        ),
    ],
)
async def test_stop_reasons(
    server: FakeProvider, response: dict[str, Any], value: str, raw: str, outcome: str
) -> None:
    server.script = [Reply(response), Reply(response)]
    reply = await client(server).complete([Message.user("q")], [], ChatOptions())
    assert (reply.stop_reason.value, reply.stop_reason.raw) == (value, raw)
    assert reply.message.text
    result = await Agent(client(server), []).run("q")
    assert result.outcome.kind == outcome


async def test_function_calls_stop_with_tool_calls_and_truncated_calls_never_run(
    server: FakeProvider,
) -> None:
    calls = r_response(r_call("c1", "lire_commande", {"numero": "C-1042"}))
    server.script = [Reply(calls)]
    reply = await client(server).complete([Message.user("q")], [], ChatOptions())
    assert reply.stop_reason.value == "tool_calls"
    cut = r_response(
        r_call("c1", "lire_commande", '{"numero": "C-1'),
        status="incomplete",
        incomplete="max_output_tokens",
    )
    server.script = [Reply(cut)]
    result = await Agent(client(server), [read_order]).run("q")
    assert result.outcome.kind == "truncated"
    assert result.transcript[-1].tool_results[0].is_error


async def test_failed_response_is_a_provider_error(server: FakeProvider) -> None:
    failed = r_response(status="failed")
    failed["error"] = {"code": "server_error", "message": "The model crashed."}
    server.script = [Reply(failed)]
    with pytest.raises(ProviderError) as caught:
        await client(server).complete([Message.user("q")], [], ChatOptions())
    assert caught.value.kind == "server" and "The model crashed" in str(caught.value)


async def test_usage_separates_cached_input(server: FakeProvider) -> None:
    server.script = [Reply(r_response(r_text("x")))]
    u = (await client(server).complete([Message.user("q")], [], ChatOptions())).usage
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens, u.total_tokens) == (16, 4, 7, 27)


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "type_", "code", "attempts"),
    [
        (400, "bad_request", "invalid_request_error", None, 1),
        (401, "authentication", "invalid_request_error", "invalid_api_key", 1),
        (403, "permission", "invalid_request_error", None, 1),
        (404, "not_found", "invalid_request_error", "model_not_found", 1),
        (429, "rate_limit", "requests", "rate_limit_exceeded", 3),
        (500, "server", "server_error", None, 3),
        (503, "overloaded", "server_error", None, 3),
        (529, "overloaded", "server_error", None, 3),
    ],
)
async def test_errors_are_typed_after_the_sdk_retries(
    server: FakeProvider, status: int, kind: str, type_: str, code: str | None, attempts: int
) -> None:
    server.script = lambda seen: error(status, oai_error("Precise reason here.", type_, code))
    with pytest.raises(ProviderError) as caught:
        await client(server, max_retries=2).complete([Message.user("q")], [], ChatOptions())
    exc = caught.value
    assert (exc.kind, exc.status) == (kind, status)
    assert "Precise reason here" in str(exc) and str(exc).count(". ") == 0
    assert type(exc.__cause__).__module__.startswith("openai")
    assert len(server.requests) == attempts
    result = await Agent(client(server), []).run("q")
    assert (result.outcome.kind, result.outcome.error) == ("failed", kind)


async def test_context_length_exceeded(server: FakeProvider) -> None:
    body = oai_error(
        "Your input exceeds the context window of this model.",
        "invalid_request_error",
        "context_length_exceeded",
    )
    server.script = lambda seen: error(400, body)
    with pytest.raises(ContextWindowExceeded):
        await client(server).complete([Message.user("q")], [], ChatOptions())
    assert (await Agent(client(server), []).run("q")).outcome.kind == "context_exceeded"


async def test_timeout_is_retried_then_typed(server: FakeProvider) -> None:
    server.script = lambda seen: Reply(r_response(r_text("late")), delay=1.0)
    with pytest.raises(ProviderError) as caught:
        await client(server, max_retries=1, timeout=0.2).complete(
            [Message.user("q")], [], ChatOptions()
        )
    assert caught.value.kind == "timeout" and len(server.requests) == 2


async def test_unreachable_server_is_a_connection_error() -> None:
    c = OpenAIResponsesClient("m", api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=0)
    with pytest.raises(ProviderError) as caught:
        await c.complete([Message.user("q")], [], ChatOptions())
    assert caught.value.kind == "connection"


# --- streaming and the loop -----------------------------------------------------------------


async def test_stream_yields_text_then_the_same_response_as_complete(server: FakeProvider) -> None:
    response = r_response(
        r_text("Je regarde les deux."),
        r_call("c1", "lire_commande", {"numero": "C-1042"}),
        r_call("c2", "convert", {"amount": 3, "currency": None}),
    )
    server.script = [Reply(response), r_sse(response)]
    c = client(server)
    whole = await c.complete([Message.user("q")], [convert.spec], ChatOptions())
    chunks = [ch async for ch in c.stream([Message.user("q")], [convert.spec], ChatOptions())]
    deltas = [ch.text for ch in chunks if isinstance(ch, TextDelta)]
    assert len(deltas) > 1 and "".join(deltas) == "Je regarde les deux."
    done = chunks[-1]
    assert isinstance(done, ResponseDone)
    assert done.response.messages == whole.messages
    assert (done.response.stop_reason, done.response.usage) == (whole.stop_reason, whole.usage)
    assert whole.message.tool_calls[1].arguments == {"amount": 3}


async def test_stream_error_event_is_typed(server: FakeProvider) -> None:
    events: list[tuple[str | None, Any]] = [
        (
            "response.created",
            {"type": "response.created", "response": r_response(status="in_progress")},
        ),
        ("error", {"type": "error", "error": {"type": "server_error", "message": "boom"}}),
    ]
    server.script = [Reply(events=events)]
    with pytest.raises(ProviderError) as caught:
        _ = [ch async for ch in client(server).stream([Message.user("q")], [], ChatOptions())]
    assert caught.value.kind == "server" and "boom" in str(caught.value)


@pytest.mark.parametrize("stream", [False, True])
async def test_agent_runs_parallel_calls_over_several_turns(
    server: FakeProvider, stream: bool
) -> None:
    turns = [
        r_response(
            r_text("Je regarde."),
            r_call("call_1", "lire_commande", {"numero": "C-1042"}),
            r_call("call_2", "lire_commande", {"numero": "C-9999"}),
        ),
        r_response(r_call("call_3", "convert", {"amount": 89.9, "currency": None})),
        r_response(r_text("C-1042: expediee (98.89 USD). C-9999: inconnue.")),
    ]
    server.script = [r_sse(t) if stream else Reply(t) for t in turns]
    seen: list[object] = []
    agent = Agent(
        client(server),
        [read_order, convert],
        instructions="Answer in French.",
        limits=Limits(max_turns=5),
        stream=stream,
        listeners=[seen.append] if stream else [],
    )
    result = await agent.run("Ou en sont C-1042 et C-9999 ?")
    assert result.outcome.kind == "completed" and result.output.startswith("C-1042")
    bodies = server.bodies()
    assert len(bodies) == 3
    second = bodies[1]["input"]
    assert [i.get("type", i.get("role")) for i in second] == [
        "user",
        "assistant",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
    assert [i["call_id"] for i in second[4:]] == ["call_1", "call_2"]
    assert json.loads(second[4]["output"])["statut"] == "expediee"
    assert "No order C-9999" in second[5]["output"]
    assert bodies[2]["input"][-1] == {
        "type": "function_call_output",
        "call_id": "call_3",
        "output": "98.89 USD",
    }
    assert all(b["store"] is False and b["instructions"] == "Answer in French." for b in bodies)
    # every call has its output, right after the calls of its turn
    for body in bodies:
        calls = [i["call_id"] for i in body["input"] if i.get("type") == "function_call"]
        outputs = [i["call_id"] for i in body["input"] if i.get("type") == "function_call_output"]
        assert calls == outputs
    if stream:
        assert any(isinstance(e, TextDelta) for e in seen)
    c = agent.client
    assert isinstance(c, OpenAIResponsesClient)
    assert c.wire.conversions == len(result.transcript) - 1


async def test_documented_error_event_shape_is_typed(server: FakeProvider) -> None:
    event = {"type": "error", "code": "rate_limit_exceeded", "message": "Slow down.", "param": None}
    server.script = [Reply(events=[("error", event)])]
    with pytest.raises(ProviderError) as caught:
        _ = [ch async for ch in client(server).stream([Message.user("q")], [], ChatOptions())]
    assert caught.value.kind == "rate_limit" and "Slow down" in str(caught.value)


async def test_encrypted_reasoning_is_sent_back_with_its_calls(server: FakeProvider) -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"}
    server.script = [
        Reply(r_response(reasoning, r_call("c1", "lire_commande", {"numero": "C-1042"}))),
        Reply(r_response(r_text("Expediee."))),
    ]
    result = await Agent(client(server, keep_reasoning=True), [read_order]).run("q")
    assert result.outcome.kind == "completed"
    first, second = server.bodies()
    assert first["include"] == ["reasoning.encrypted_content"]
    assert [i.get("type", i.get("role")) for i in second["input"]] == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert second["input"][1] == reasoning
    assert result.transcript[1].tool_calls[0].id == "c1"  # reasoning rides in metadata only
