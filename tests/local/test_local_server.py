"""The OpenAI-compatible local server, through the real OpenAI SDK on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest
from typer.testing import CliRunner

from tether.cli import app
from tether.clients import ChatOptions, ChatResponse, StreamChunk, TextDelta
from tether.constrained import JSON_SCHEMA, ConstrainedToolCalling
from tether.demo import read_order
from tether.errors import ConfigError, ContextWindowExceeded, ProviderError
from tether.providers.local_server import BadRequest, parse_request, running_server, serve_local
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
    _, tools, options = parse_request(
        {"messages": [{"role": "user", "content": "x"}], "tools": [TOOL], "tool_choice": "none"}
    )
    assert [t.name for t in tools] == ["lire_commande"] and options.tool_choice == "none"


# --- what the server refuses, and how it fails --------------------------------------------

HISTORY_WITH_CALLS: list[Any] = [
    {"role": "user", "content": "Where is my order C-1042?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lire_commande", "arguments": '{"numero":"C-1042"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"statut":"expediee"}'},
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("with_tools", [True, False])
async def test_a_history_with_calls_is_answered_in_text_by_the_real_model(
    with_tools: bool, stream: bool
) -> None:
    """tool_choice "none", or no tools at all, on a history that holds calls."""
    extra: dict[str, Any] = {"tools": [TOOL], "tool_choice": "none"} if with_tools else {}
    async with running_server() as base_url:
        api = sdk(base_url)
        create: Any = api.chat.completions.create
        if stream:
            chunks = await create(
                model="m", messages=HISTORY_WITH_CALLS, max_tokens=16, stream=True, **extra
            )
            deltas = [c.choices[0] async for c in chunks if c.choices]
            text = "".join(d.delta.content or "" for d in deltas)
            assert not any(d.delta.tool_calls for d in deltas)
            assert deltas[-1].finish_reason in ("stop", "length")
        else:
            reply = await create(model="m", messages=HISTORY_WITH_CALLS, max_tokens=16, **extra)
            text = reply.choices[0].message.content or ""
            assert not reply.choices[0].message.tool_calls
        assert text.strip()
        await api.close()


def scripted_app(*replies: str) -> tuple[ConstrainedToolCalling, ScriptedClient]:
    inner = ScriptedClient([text_reply(r, stop="stop") for r in replies])
    return ConstrainedToolCalling(inner), inner


BAD_REQUESTS: list[tuple[str, dict[str, Any], str]] = [
    ("max_tokens -1", {"max_tokens": -1}, "max_tokens must be a whole number from 1 to 2048"),
    ("max_tokens 0", {"max_tokens": 0}, "from 1 to 2048"),
    ("max_tokens huge", {"max_tokens": 10**9}, "from 1 to 2048"),
    ("max_tokens text", {"max_tokens": "64"}, "from 1 to 2048"),
    ("max_tokens bool", {"max_tokens": True}, "from 1 to 2048"),
    ("max_completion_tokens", {"max_completion_tokens": 5000}, "max_completion_tokens must"),
    ("n 2", {"n": 2}, "n must be 1"),
    (
        "parameters as a string",
        {"tools": [{"type": "function", "function": {"name": "t", "parameters": "{}"}}]},
        "parameters of tool 't' are not a usable schema",
    ),
    (
        "dangling $ref",
        {
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "t",
                        "parameters": {
                            "type": "object",
                            "properties": {"a": {"$ref": "#/$defs/missing"}},
                        },
                    },
                }
            ]
        },
        "points to nothing",
    ),
    (
        "invalid schema",
        {"tools": [{"type": "function", "function": {"name": "t", "parameters": {"type": 7}}}]},
        "not a usable schema",
    ),
    ("tool_choice unknown", {"tools": [TOOL], "tool_choice": "sometimes"}, "tool_choice must"),
    (
        "tool_choice names no tool",
        {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "x"}}},
        "not a tool of the request",
    ),
    ("tool_choice required, no tools", {"tool_choice": "required"}, "needs at least one tool"),
    (
        "response_format dangling $ref",
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/nope"}},
            }
        },
        "points to nothing",
    ),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("label", "fields", "said"), BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS]
)
async def test_a_request_the_server_cannot_honour_is_a_400_before_any_work(
    label: str, fields: dict[str, Any], said: str, stream: bool
) -> None:
    client, inner = scripted_app('{"answer": "never"}')
    async with running_server(client) as base_url:
        api = sdk(base_url)
        create: Any = api.chat.completions.create
        with pytest.raises(openai.BadRequestError) as caught:
            await create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=stream, **fields
            )
        assert said in str(caught.value)
        assert inner.requests == []  # refused before the model was asked anything
        await api.close()


async def test_the_ceiling_itself_and_one_choice_are_accepted() -> None:
    client, inner = scripted_app("ok")
    async with running_server(client) as base_url:
        api = sdk(base_url)
        reply = await api.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=2048, n=1
        )
        assert reply.choices[0].message.content == "ok"
        assert inner.requests[0].options.max_output_tokens == 2048
        await api.close()


async def test_tool_choice_reaches_the_constrained_reply() -> None:
    call = '{"tool_calls": [{"name": "lire_commande", "arguments": {"numero": "C-1042"}}]}'
    client, inner = scripted_app(call)
    async with running_server(client) as base_url:
        api = sdk(base_url)
        create: Any = api.chat.completions.create
        reply = await create(
            model="m",
            messages=[{"role": "user", "content": "Where is C-1042?"}],
            tools=[TOOL],
            tool_choice={"type": "function", "function": {"name": "lire_commande"}},
        )
        assert reply.choices[0].finish_reason == "tool_calls"
        schema = inner.requests[0].options.extra[JSON_SCHEMA]
        assert not jsonschema.Draft202012Validator(schema).is_valid({"answer": "x"})
        await api.close()


class FailingClient:
    """Fails at once, or after one piece of text."""

    def __init__(self, after_text: bool, error: Exception) -> None:
        self.after_text = after_text
        self.error = error

    async def complete(self, messages: Any, tools: Any, options: Any) -> ChatResponse:
        raise self.error

    async def stream(self, messages: Any, tools: Any, options: Any) -> AsyncIterator[StreamChunk]:
        if self.after_text:
            yield TextDelta("Hel")
        raise self.error


async def test_a_failure_before_the_first_token_is_an_http_error_even_when_streaming() -> None:
    failing = FailingClient(False, ContextWindowExceeded("the request does not fit"))
    async with running_server(failing) as base_url:
        api = sdk(base_url)
        with pytest.raises(openai.BadRequestError, match="does not fit") as caught:
            await api.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}], stream=True
            )
        assert caught.value.status_code == 400
        await api.close()


async def test_a_failure_mid_stream_ends_it_with_an_error_event_the_sdk_raises() -> None:
    failing = FailingClient(True, ProviderError("the local model failed: boom"))
    async with running_server(failing) as base_url:
        api = sdk(base_url)
        stream = await api.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        seen: list[str] = []

        async def read() -> None:
            async for chunk in stream:
                seen.extend(c.delta.content or "" for c in chunk.choices)

        with pytest.raises(openai.APIError, match="boom"):
            await read()
        assert "".join(seen) == "Hel"
        await api.close()


def test_serve_local_says_no_endpoint_when_the_port_is_taken() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    said: list[str] = []
    try:
        with pytest.raises(ConfigError, match=f"cannot listen on 127.0.0.1:{port}"):
            serve_local("127.0.0.1", port, say=said.append)
    finally:
        taken.close()
    assert not any("endpoint" in line for line in said)


def test_the_command_fails_in_one_line_when_the_port_is_taken() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        result = CliRunner().invoke(app, ["serve-local", "--port", str(port)])
    finally:
        taken.close()
    assert result.exit_code == 2
    said = " ".join(result.stderr.split())
    assert said.startswith(f"error: cannot listen on 127.0.0.1:{port}: ")
    assert said.endswith("choose another --port")
    assert "Traceback" not in result.output and "endpoint" not in result.output


def test_serve_local_prints_the_bound_endpoint_once_it_serves() -> None:
    command = [str(Path(sys.executable).parent / "tether"), "serve-local", "--port", "0"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        lines: list[str] = []
        for line in process.stdout:
            lines.append(line)
            if "endpoint" in line:
                break
        match = re.search(r"http://127\.0\.0\.1:(\d+)/v1", lines[-1])
        assert match and match.group(1) != "0", lines
        assert any("model ready" in line for line in lines[:-1])
        api = openai.OpenAI(
            base_url=match.group(0),
            api_key="x",
            http_client=openai.DefaultHttpxClient(trust_env=False),
        )
        assert api.models.list().data[0].id == "SmolLM2-135M-Instruct.Q4_1"
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
