"""The Chat Completions adapter (OpenAI-compatible servers) through the real SDK."""

from __future__ import annotations

import json
from typing import Any

import pytest
from provider_server import FakeProvider, Reply, Seen, error
from provider_tools import convert, read_order
from provider_wire import c_call, c_completion, c_sse

from tether.clients import ChatOptions, ResponseDone, TextDelta
from tether.errors import ContextWindowExceeded, ProviderError
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message, ToolCall, ToolResult
from tether.providers.openai_chat import OpenAIChatClient


def client(server: FakeProvider, **kwargs: Any) -> OpenAIChatClient:
    kwargs.setdefault("max_retries", 0)
    return OpenAIChatClient("local-test", base_url=f"{server.url}/v1", **kwargs)


def test_history_maps_to_chat_messages() -> None:
    c = OpenAIChatClient("m", base_url="http://127.0.0.1:1/v1")
    history = [
        Message.user("two orders"),
        Message.assistant(
            ToolCall("c1", "lire_commande", {"numero": "C-1042"}),
            ToolCall("c2", "lire_commande", {"numero": "C-9"}),
        ),
        Message.results([ToolResult("c1", "ok"), ToolResult("c2", "No order.", is_error=True)]),
    ]
    body = c.request_body(history, [read_order.spec], ChatOptions("Be brief.", 100))
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "two orders"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lire_commande", "arguments": '{"numero":"C-1042"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "lire_commande", "arguments": '{"numero":"C-9"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "tool", "tool_call_id": "c2", "content": "No order."},
    ]
    assert body["tools"][0]["function"]["parameters"] == dict(read_order.spec.parameters)
    assert body["max_tokens"] == 100


@pytest.mark.parametrize(
    ("finish", "value", "outcome"),
    [
        ("stop", "stop", "completed"),
        ("length", "length", "truncated"),
        ("content_filter", "content_filter", "refused"),
        (None, "missing", "completed"),
        ("eos", "unknown", "completed"),
    ],
)
async def test_finish_reasons(
    server: FakeProvider, finish: str | None, value: str, outcome: str
) -> None:
    server.script = [Reply(c_completion("an answer", finish=finish))] * 2
    reply = await client(server).complete([Message.user("q")], [], ChatOptions())
    assert (reply.stop_reason.value, reply.stop_reason.raw) == (value, finish)
    result = await Agent(client(server), []).run("q")
    assert result.outcome.kind == outcome


async def test_tool_calls_finish_and_missing_finish_both_run_the_calls(
    server: FakeProvider,
) -> None:
    # decide on content: a server that omits finish_reason still gets its calls run
    server.script = [
        Reply(c_completion(None, c_call("c1", "lire_commande", {"numero": "C-1042"}), finish=None)),
        Reply(c_completion("done", finish="stop")),
    ]
    result = await Agent(client(server), [read_order]).run("q")
    assert result.outcome.kind == "completed" and len(server.requests) == 2
    server.script = [
        Reply(c_completion(None, c_call("c1", "convert", {"amount": 1}), finish="tool_calls"))
    ]
    reply = await client(server).complete([Message.user("q")], [], ChatOptions())
    assert reply.stop_reason.value == "tool_calls"


async def test_refusal_field_is_refused(server: FakeProvider) -> None:
    body = c_completion(None)
    body["choices"][0]["message"]["refusal"] = "I can't help with that."
    server.script = [Reply(body)]
    result = await Agent(client(server), []).run("q")
    assert result.outcome.kind == "refused"
    assert result.transcript[-1].text == "I can't help with that."


async def test_usage_and_arguments_sent_as_an_object(server: FakeProvider) -> None:
    body = c_completion(
        None,
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "convert", "arguments": {"amount": 2}},
        },
    )
    server.script = [Reply(body)]
    reply = await client(server).complete([Message.user("q")], [], ChatOptions())
    assert reply.message.tool_calls == [ToolCall("c1", "convert", {"amount": 2})]
    u = reply.usage
    assert (u.input_tokens, u.cache_read_tokens, u.output_tokens) == (20, 10, 9)


@pytest.mark.parametrize(
    ("status", "kind", "attempts"),
    [
        (400, "bad_request", 1),
        (401, "authentication", 1),
        (403, "permission", 1),
        (404, "not_found", 1),
        (429, "rate_limit", 3),
        (500, "server", 3),
        (503, "overloaded", 3),
        (529, "overloaded", 3),
    ],
)
async def test_errors_are_typed_after_the_sdk_retries(
    server: FakeProvider, status: int, kind: str, attempts: int
) -> None:
    body = {"error": {"message": "Precise reason here.", "type": "x", "code": status}}
    server.script = lambda seen: error(status, body)
    with pytest.raises(ProviderError) as caught:
        await client(server, max_retries=2).complete([Message.user("q")], [], ChatOptions())
    assert (caught.value.kind, caught.value.status) == (kind, status)
    assert "Precise reason here" in str(caught.value) and "openai-chat" in str(caught.value)
    assert len(server.requests) == attempts
    result = await Agent(client(server), []).run("q")
    assert (result.outcome.kind, result.outcome.error) == ("failed", kind)


@pytest.mark.parametrize(
    "body",
    [
        # vLLM
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. "
            "However, you requested 5000 tokens.",
            "type": "BadRequestError",
            "code": 400,
        },
        # llama.cpp server
        {
            "error": {
                "code": 400,
                "message": "the request exceeds the available context size, try increasing it",
                "type": "exceed_context_size_error",
            }
        },
    ],
)
async def test_context_overflow_of_local_servers(
    server: FakeProvider, body: dict[str, Any]
) -> None:
    server.script = lambda seen: error(400, body)
    with pytest.raises(ContextWindowExceeded):
        await client(server).complete([Message.user("q")], [], ChatOptions())


async def test_timeout_is_retried_then_typed(server: FakeProvider) -> None:
    server.script = lambda seen: Reply(c_completion("late"), delay=1.0)
    with pytest.raises(ProviderError) as caught:
        await client(server, max_retries=1, timeout=0.2).complete(
            [Message.user("q")], [], ChatOptions()
        )
    assert caught.value.kind == "timeout" and len(server.requests) == 2


async def test_unreachable_server_is_a_connection_error() -> None:
    c = OpenAIChatClient("m", base_url="http://127.0.0.1:9/v1", max_retries=0)
    with pytest.raises(ProviderError) as caught:
        await c.complete([Message.user("q")], [], ChatOptions())
    assert caught.value.kind == "connection" and "127.0.0.1:9" in str(caught.value)


@pytest.mark.parametrize("with_usage", [True, False])
async def test_stream_yields_text_then_the_same_response_as_complete(
    server: FakeProvider, with_usage: bool
) -> None:
    completion = c_completion(
        "Je regarde les deux commandes.",
        c_call("c1", "lire_commande", {"numero": "C-1042"}),
        c_call("c2", "convert", {"amount": 89.9, "currency": "USD"}),
        finish="tool_calls",
    )
    server.script = [Reply(completion), c_sse(completion, with_usage=with_usage)]
    c = client(server, stream_usage=with_usage)
    whole = await c.complete([Message.user("q")], [], ChatOptions())
    chunks = [ch async for ch in c.stream([Message.user("q")], [], ChatOptions())]
    deltas = [ch.text for ch in chunks if isinstance(ch, TextDelta)]
    assert len(deltas) > 1 and "".join(deltas) == "Je regarde les deux commandes."
    done = chunks[-1]
    assert isinstance(done, ResponseDone)
    assert done.response.messages == whole.messages
    assert done.response.stop_reason == whole.stop_reason
    sent = server.bodies()[1]
    assert sent["stream"] is True
    if with_usage:
        assert done.response.usage == whole.usage
        assert sent["stream_options"] == {"include_usage": True}
    else:
        assert "stream_options" not in sent and done.response.usage.input_tokens == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_agent_runs_parallel_calls_over_several_turns(
    server: FakeProvider, stream: bool
) -> None:
    turns = [
        c_completion(
            "Je regarde.",
            c_call("call_1", "lire_commande", {"numero": "C-1042"}),
            c_call("call_2", "lire_commande", {"numero": "C-9999"}),
            finish="tool_calls",
        ),
        c_completion(None, c_call("call_3", "convert", {"amount": 89.9}), finish="tool_calls"),
        c_completion("C-1042: expediee (98.89 USD). C-9999: inconnue.", finish="stop"),
    ]
    server.script = [c_sse(t) if stream else Reply(t) for t in turns]
    agent = Agent(
        client(server),
        [read_order, convert],
        instructions="Answer in French.",
        limits=Limits(max_turns=5),
        stream=stream,
        listeners=[lambda event: None] if stream else [],
    )
    result = await agent.run("Ou en sont C-1042 et C-9999 ?")
    assert result.outcome.kind == "completed" and result.output.startswith("C-1042")
    bodies = server.bodies()
    assert [r.path for r in server.requests] == ["/v1/chat/completions"] * 3
    second = bodies[1]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "tool"]
    assert [m["tool_call_id"] for m in second[3:]] == ["call_1", "call_2"]
    assert json.loads(second[3]["content"])["statut"] == "expediee"
    assert "No order C-9999" in second[4]["content"]
    assert bodies[2]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_3",
        "content": "98.89 USD",
    }
    # every assistant tool call is answered by the tool messages right after it
    for body in bodies:
        msgs = body["messages"]
        for i, m in enumerate(msgs):
            ids = [c["id"] for c in m.get("tool_calls") or ()]
            if ids:
                answers = [x.get("tool_call_id") for x in msgs[i + 1 : i + 1 + len(ids)]]
                assert answers == ids


def test_an_assistant_message_with_only_calls_has_empty_content_never_null() -> None:
    c = OpenAIChatClient("m", base_url="http://127.0.0.1:1/v1")
    history = [
        Message.user("q"),
        Message.assistant(ToolCall("c1", "lire_commande", {"numero": "C-1042"})),
        Message.results([ToolResult("c1", "ok")]),
        Message.assistant("Shipped."),
    ]
    body = c.request_body(history, [read_order.spec], ChatOptions())
    assistants = [m for m in body["messages"] if m["role"] == "assistant"]
    assert [m["content"] for m in assistants] == ["", "Shipped."]


def strict_about_null_content(replies: list[Reply]) -> Any:
    """Answers like llama-cpp-python's server: HTTP 500 for an assistant ``content: null``."""

    def answer(seen: Seen) -> Reply:
        for m in seen.body["messages"]:
            if m.get("role") == "assistant" and "content" in m and m["content"] is None:
                body = {"error": {"message": "can only concatenate str (not NoneType) to str"}}
                return error(500, body)
        return replies.pop(0)

    return answer


@pytest.mark.parametrize("stream", [False, True])
async def test_a_multi_turn_tool_round_trip_passes_a_server_strict_about_null_content(
    server: FakeProvider, stream: bool
) -> None:
    turns = [
        c_completion(
            None, c_call("c1", "lire_commande", {"numero": "C-1042"}), finish="tool_calls"
        ),
        c_completion("C-1042: expediee.", finish="stop"),
    ]
    server.script = strict_about_null_content([c_sse(t) if stream else Reply(t) for t in turns])
    listeners = [lambda event: None] if stream else []  # the loop streams for listeners
    agent = Agent(client(server), [read_order], stream=stream, listeners=listeners)
    result = await agent.run("Ou en est C-1042 ?")
    assert result.outcome.kind == "completed", result.outcome
    assert result.output == "C-1042: expediee."
    assert len(server.requests) == 2


async def test_a_stream_without_the_usage_it_asked_for_is_a_clear_error(
    server: FakeProvider,
) -> None:
    server.script = [c_sse(c_completion("hello"), with_usage=False)]
    with pytest.raises(ProviderError, match="no usage in its stream") as caught:
        async for _ in client(server).stream([Message.user("q")], [], ChatOptions()):
            pass
    assert "stream_usage=False" in str(caught.value)
