"""The OpenAI-compatible local server, through the real OpenAI SDK on 127.0.0.1."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest

from tether.clients import ChatOptions
from tether.constrained import JSON_SCHEMA, ConstrainedToolCalling
from tether.demo import read_order
from tether.providers.local_server import BadRequest, parse_request, running_server
from tether.providers.scripted import ScriptedClient, text_reply

TOOL = {
    "type": "function",
    "function": {
        "name": read_order.spec.name,
        "description": read_order.spec.description,
        "parameters": read_order.spec.parameters,
    },
}


def sdk(base_url: str) -> openai.AsyncOpenAI:
    http = openai.DefaultAsyncHttpxClient(trust_env=False)  # never through a proxy
    return openai.AsyncOpenAI(base_url=base_url, api_key="x", http_client=http, max_retries=0)


async def test_the_real_model_answers_the_openai_sdk() -> None:
    async with running_server() as base_url:
        assert base_url.startswith("http://127.0.0.1:")
        api = sdk(base_url)
        models = await api.models.list()
        assert models.data[0].id == "SmolLM2-135M-Instruct.Q4_1"

        completion = await api.chat.completions.create(
            model="local",
            messages=[
                {"role": "system", "content": "You are a customer-support agent."},
                {"role": "user", "content": "Where is my order C-1042?"},
            ],
            tools=[TOOL],  # type: ignore[list-item]
            max_tokens=64,
        )
        choice = completion.choices[0]
        assert choice.finish_reason in ("tool_calls", "stop")
        assert choice.message.tool_calls or choice.message.content
        for call in choice.message.tool_calls or []:
            assert call.function.name == "lire_commande"  # type: ignore[union-attr]
            args = json.loads(call.function.arguments)  # type: ignore[union-attr]
            jsonschema.validate(args, read_order.spec.parameters)
        assert completion.usage is not None and completion.usage.prompt_tokens > 0

        stream = await api.chat.completions.create(
            model="local",
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=8,
            stream=True,
        )
        pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        assert "".join(pieces).strip()
        await api.close()


async def test_tool_calls_and_results_round_trip_through_the_sdk() -> None:
    """A scripted inner model: exact mapping both ways, plain and streamed."""
    call = '{"tool_calls": [{"name": "lire_commande", "arguments": {"numero": "C-1042"}}]}'
    inner = ScriptedClient(
        [
            text_reply(call, stop="stop"),
            text_reply(call, stop="stop"),
            text_reply('{"answer": "Shipped."}', stop="stop"),
        ]
    )
    async with running_server(ConstrainedToolCalling(inner)) as base_url:
        api = sdk(base_url)
        messages: list[Any] = [{"role": "user", "content": "Where is C-1042?"}]
        first = await api.chat.completions.create(
            model="m",
            messages=messages,
            tools=[TOOL],  # type: ignore[list-item]
        )
        (tc,) = first.choices[0].message.tool_calls or []
        assert first.choices[0].finish_reason == "tool_calls"
        assert tc.function.arguments == '{"numero":"C-1042"}'  # type: ignore[union-attr]

        stream = await api.chat.completions.create(
            model="m",
            messages=messages,
            tools=[TOOL],
            stream=True,  # type: ignore[list-item]
        )
        deltas = [c.choices[0] async for c in stream if c.choices]
        streamed = [t for d in deltas for t in d.delta.tool_calls or []]
        assert streamed[0].function and streamed[0].function.name == "lire_commande"
        assert deltas[-1].finish_reason == "tool_calls"

        messages += [
            first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": tc.id, "content": '{"statut":"expediee"}'},
        ]
        last = await api.chat.completions.create(
            model="m",
            messages=messages,
            tools=[TOOL],  # type: ignore[list-item]
        )
        assert last.choices[0].message.content == "Shipped."
        assert last.choices[0].finish_reason == "stop"
        shown = inner.requests[-1].messages[-1].text
        assert 'lire_commande({"numero":"C-1042"}) returned: {"statut":"expediee"}' in shown

        with pytest.raises(openai.BadRequestError):
            await api.chat.completions.create(model="m", messages=[])
        await api.close()


def test_parse_request_reads_roles_tools_and_formats() -> None:
    messages, tools, options = parse_request(
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "a", "function": {"name": "t", "arguments": "{}"}},
                        {"id": "b", "function": {"name": "t", "arguments": "{bad"}},
                    ],
                },
                {"role": "tool", "tool_call_id": "a", "content": "1"},
                {"role": "tool", "tool_call_id": "b", "content": "2"},
            ],
            "tools": [TOOL],
            "response_format": {"type": "json_object"},
            "max_tokens": 9,
        }
    )
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert [r.call_id for r in messages[2].tool_results] == ["a", "b"]
    assert messages[1].tool_calls[1].malformed
    assert tools[0].name == "lire_commande"
    assert options == ChatOptions("Be brief.", 9, None, None, {JSON_SCHEMA: {"type": "object"}})
    with pytest.raises(BadRequest):
        parse_request({"messages": [{"role": "wizard", "content": "x"}]})
    assert (
        parse_request(
            {"messages": [{"role": "user", "content": "x"}], "tools": [TOOL], "tool_choice": "none"}
        )[1]
        == []
    )
