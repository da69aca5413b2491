"""The Anthropic adapter through the real SDK against a scripted server on 127.0.0.1."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from provider_server import FakeProvider, Reply, error
from provider_tools import anthropic_pairing_ok, convert, read_order
from provider_wire import a_call, a_error, a_message, a_sse, a_text

from tether.clients import ChatOptions, ResponseDone, TextDelta
from tether.errors import ContextWindowExceeded, ProviderError
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message, Text, ToolCall, ToolResult
from tether.providers.anthropic import AnthropicClient
from tether.tools import ToolSpec

SEED = json.loads((Path(__file__).parent / "data" / "anthropic_seed_wire.json").read_text())


def client(server: FakeProvider, **kwargs: Any) -> AnthropicClient:
    kwargs.setdefault("max_retries", 0)
    return AnthropicClient("claude-test", api_key="sk-test", base_url=server.url, **kwargs)


def normalised(body: dict[str, Any]) -> dict[str, Any]:
    """Drop cache_control; a string content is the same as one text block (API docs)."""
    body = copy.deepcopy(body)

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k != "cache_control"}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    body = strip(body)
    for m in body["messages"]:
        if isinstance(m["content"], str):
            m["content"] = [{"type": "text", "text": m["content"]}]
    return body


def seed_spec() -> ToolSpec:
    wire = SEED["first_request"]["tools"][0]
    return ToolSpec(wire["name"], wire["description"], wire["input_schema"])


# --- the seed's three documents -------------------------------------------------------------


@pytest.mark.parametrize("cache", [False, True])
async def test_seed_documents_round_trip(server: FakeProvider, cache: bool) -> None:
    server.script = [Reply(SEED["first_response"]), Reply(a_message(a_text("Expediee.")))]
    c = AnthropicClient("claude-opus-5-5", api_key="k", base_url=server.url, cache=cache)
    options = ChatOptions(max_output_tokens=1024)
    question = Message.user("Ou en est ma commande C-1042 ?")

    first = await c.complete([question], [seed_spec()], options)
    assert first.stop_reason.value == "tool_use"
    assert first.message.tool_calls == [
        ToolCall("toolu_01A09q90qw90lq917835lq9", "lire_commande", {"numero": "C-1042"})
    ]
    result = Message.results(
        [
            ToolResult(
                first.message.tool_calls[0].id,
                SEED["second_request"]["messages"][2]["content"][0]["content"],
            )
        ]
    )
    await c.complete([question, first.message, result], [seed_spec()], options)

    sent_first, sent_second = server.bodies()
    assert normalised(sent_first) == normalised(SEED["first_request"])
    assert normalised(sent_second) == normalised(SEED["second_request"])
    if not cache:
        assert "cache_control" not in json.dumps(sent_second)
    else:  # breakpoints on the last tool and the newest message only (no system here)
        assert sent_second["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        assert sent_second["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        assert json.dumps(sent_second).count("cache_control") == 2


def test_cache_breakpoints_follow_the_growing_history() -> None:
    c = AnthropicClient("m", api_key="k")
    history = [
        Message.user("hi"),
        Message.assistant("let me look", ToolCall("t1", "lire_commande", {"numero": "C-1042"})),
        Message.results([ToolResult("t1", "ok")]),
    ]
    body = c.request_body(history, [read_order.spec, convert.spec], ChatOptions("be brief"))
    assert body["system"] == [
        {"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}
    ]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][1]["cache_control"] == {"type": "ephemeral"}
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert json.dumps(body).count("cache_control") == 3  # the API allows at most 4
    # the cached wire form is never decorated: the next turn moves the breakpoint
    history += [Message.assistant("done")]
    body = c.request_body(history, [read_order.spec], ChatOptions("be brief"))
    assert "cache_control" not in json.dumps(body["messages"][:-1])
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_tool_results_come_first_and_merge_with_following_user_text() -> None:
    c = AnthropicClient("m", api_key="k", cache=False)
    history = [
        Message.user("two orders"),
        Message.assistant(
            ToolCall("a", "lire_commande", {"numero": "C-1042"}),
            ToolCall("b", "lire_commande", {"numero": "C-9"}),
        ),
        Message.results([ToolResult("a", "ok"), ToolResult("b", "No order C-9.", is_error=True)]),
        Message.user("also, hurry"),
    ]
    body = c.request_body(history, [], ChatOptions())
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "a", "content": "ok"},
        {"type": "tool_result", "tool_use_id": "b", "content": "No order C-9.", "is_error": True},
        {"type": "text", "text": "also, hurry"},
    ]
    assert anthropic_pairing_ok(body)


def test_strict_tool_is_flagged_per_tool_with_a_closed_schema() -> None:
    strict = ToolSpec("s", "d", {"type": "object", "properties": {"x": {"type": "string"}}}, True)
    body = AnthropicClient("m", api_key="k").request_body(
        [Message.user("x")], [strict, read_order.spec], ChatOptions()
    )
    assert body["tools"][0]["strict"] is True
    assert body["tools"][0]["input_schema"]["additionalProperties"] is False
    assert "strict" not in body["tools"][1]
    assert body["max_tokens"] == 4096  # Anthropic requires one: the client's default


# --- stop reasons ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value", "outcome"),
    [
        ("end_turn", "end_turn", "completed"),
        ("stop_sequence", "stop_sequence", "completed"),
        ("max_tokens", "max_tokens", "truncated"),
        ("refusal", "refusal", "refused"),
        ("model_context_window_exceeded", "model_context_window_exceeded", "context_exceeded"),
        (None, "missing", "completed"),
        ("brand_new_reason", "unknown", "completed"),
    ],
)
async def test_stop_reasons(
    server: FakeProvider, raw: str | None, value: str, outcome: str
) -> None:
    server.script = [Reply(a_message(a_text("partial answer"), stop=raw))]
    result = await Agent(client(server), [read_order]).run("hello")
    assert result.outcome.kind == outcome
    response = result.transcript[-1]
    assert response.text == "partial answer"
    server.script = [Reply(a_message(a_text("x"), stop=raw))]
    reply = await client(server).complete([Message.user("q")], [], ChatOptions())
    assert (reply.stop_reason.value, reply.stop_reason.raw) == (value, raw)


async def test_truncated_tool_call_is_never_executed(server: FakeProvider) -> None:
    server.script = [
        Reply(a_message(a_call("t1", "lire_commande", numero="C-1042"), stop="max_tokens"))
    ]
    result = await Agent(client(server), [read_order]).run("hello")
    assert result.outcome.kind == "truncated"
    closing = result.transcript[-1]
    assert closing.role == "tool" and closing.tool_results[0].is_error


async def test_pause_turn_is_continued(server: FakeProvider) -> None:
    server.script = [
        Reply(a_message(a_text("searching..."), stop="pause_turn")),
        Reply(a_message(a_text("found it"), stop="end_turn")),
    ]
    result = await Agent(client(server), []).run("search")
    assert result.outcome.kind == "completed" and result.output == "found it"
    assert len(server.requests) == 2
    assert server.bodies()[1]["messages"][1]["content"][0]["text"] == "searching..."


async def test_usage_counts_cache_reads_and_writes(server: FakeProvider) -> None:
    usage = {
        "input_tokens": 12,
        "output_tokens": 3,
        "cache_read_input_tokens": 900,
        "cache_creation_input_tokens": 40,
    }
    server.script = [Reply(a_message(a_text("ok"), usage=usage))]
    reply = await client(server).complete([Message.user("q")], [], ChatOptions())
    u = reply.usage
    assert (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens) == (
        12,
        3,
        900,
        40,
    )
    assert u.requests == 1 and u.total_tokens == 955


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "error_type", "attempts"),
    [
        (400, "bad_request", "invalid_request_error", 1),
        (401, "authentication", "authentication_error", 1),
        (403, "permission", "permission_error", 1),
        (404, "not_found", "not_found_error", 1),
        (429, "rate_limit", "rate_limit_error", 3),
        (500, "server", "api_error", 3),
        (503, "overloaded", "overloaded_error", 3),
        (529, "overloaded", "overloaded_error", 3),
    ],
)
async def test_errors_are_typed_after_the_sdk_retries(
    server: FakeProvider, status: int, kind: str, error_type: str, attempts: int
) -> None:
    server.script = lambda seen: error(status, a_error(error_type, "Something precise went wrong."))
    c = client(server, max_retries=2)
    with pytest.raises(ProviderError) as caught:
        await c.complete([Message.user("q")], [], ChatOptions())
    exc = caught.value
    assert (exc.kind, exc.status) == (kind, status)
    assert "Something precise went wrong" in str(exc) and "\n" not in str(exc)
    assert str(exc).endswith(".")
    assert isinstance(exc.__cause__, Exception) and type(exc.__cause__).__module__.startswith(
        "anthropic"
    )
    assert len(server.requests) == attempts  # the SDK retried the transient ones
    assert [r.headers.get("x-stainless-retry-count") for r in server.requests] == [
        str(i) for i in range(attempts)
    ]
    # the loop turns it into a typed outcome with the transcript attached
    server.requests.clear()
    result = await Agent(client(server, max_retries=1), []).run("q")
    assert (result.outcome.kind, result.outcome.error) == ("failed", kind)
    assert result.transcript == (Message.user("q"),)


async def test_prompt_too_long_is_context_exceeded(server: FakeProvider) -> None:
    body = a_error("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")
    server.script = lambda seen: error(400, body)
    with pytest.raises(ContextWindowExceeded, match="context window"):
        await client(server).complete([Message.user("q")], [], ChatOptions())
    result = await Agent(client(server), []).run("q")
    assert result.outcome.kind == "context_exceeded"


async def test_timeout_is_retried_then_typed(server: FakeProvider) -> None:
    server.script = lambda seen: Reply(a_message(a_text("late")), delay=1.0)
    c = client(server, max_retries=1, timeout=0.2)
    with pytest.raises(ProviderError) as caught:
        await c.complete([Message.user("q")], [], ChatOptions())
    assert caught.value.kind == "timeout" and "timed out after 0.2 s" in str(caught.value)
    assert len(server.requests) == 2


async def test_unreachable_server_is_a_connection_error() -> None:
    c = AnthropicClient("m", api_key="k", base_url="http://127.0.0.1:9", max_retries=0)
    with pytest.raises(ProviderError) as caught:
        await c.complete([Message.user("q")], [], ChatOptions())
    assert caught.value.kind == "connection" and "127.0.0.1:9" in str(caught.value)


# --- streaming ------------------------------------------------------------------------------


async def test_stream_yields_text_then_the_same_response_as_complete(server: FakeProvider) -> None:
    message = a_message(
        a_text("Je consulte les deux commandes."),
        a_call("t1", "lire_commande", numero="C-1042"),
        a_call("t2", "convert", amount=89.9, currency="USD"),
        stop="tool_use",
        usage={"input_tokens": 50, "output_tokens": 30, "cache_read_input_tokens": 7},
    )
    server.script = [Reply(message), a_sse(message)]
    c = client(server)
    whole = await c.complete([Message.user("q")], [], ChatOptions())
    chunks = [ch async for ch in c.stream([Message.user("q")], [], ChatOptions())]
    deltas = [ch.text for ch in chunks if isinstance(ch, TextDelta)]
    assert len(deltas) > 1 and "".join(deltas) == "Je consulte les deux commandes."
    assert isinstance(chunks[-1], ResponseDone)
    streamed = chunks[-1].response
    assert streamed.messages == whole.messages
    assert (streamed.stop_reason, streamed.usage) == (whole.stop_reason, whole.usage)
    assert server.bodies()[1]["stream"] is True


async def test_truncated_streamed_tool_input_keeps_the_raw_text(server: FakeProvider) -> None:
    events = a_sse(
        a_message(a_call("t1", "lire_commande", numero="C-1042"), stop="max_tokens")
    ).events
    assert events is not None
    cut = [
        e
        for e in events
        if not (e[0] == "content_block_delta" and e[1]["delta"]["partial_json"].endswith("}"))
    ]
    server.script = [Reply(events=cut)]
    chunks = [ch async for ch in client(server).stream([Message.user("q")], [], ChatOptions())]
    done = chunks[-1]
    assert isinstance(done, ResponseDone)
    call = done.response.message.tool_calls[0]
    assert call.malformed and call.raw_arguments == '{"numero": "C-1042'
    assert done.response.stop_reason.truncated


async def test_error_event_inside_a_stream_is_typed(server: FakeProvider) -> None:
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": a_message(stop=None)}),
        ("error", a_error("overloaded_error", "Overloaded")),
    ]
    server.script = [Reply(events=events)]
    with pytest.raises(ProviderError) as caught:
        _ = [ch async for ch in client(server).stream([Message.user("q")], [], ChatOptions())]
    assert caught.value.kind == "overloaded"


# --- the loop, end to end -------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_agent_runs_parallel_calls_over_several_turns(
    server: FakeProvider, stream: bool
) -> None:
    turns = [
        a_message(
            a_text("Je regarde."),
            a_call("toolu_1", "lire_commande", numero="C-1042"),
            a_call("toolu_2", "lire_commande", numero="C-9999"),
            stop="tool_use",
        ),
        a_message(a_call("toolu_3", "convert", amount=89.9), stop="tool_use"),
        a_message(a_text("C-1042 est expediee (98.89 USD); C-9999 n'existe pas."), stop="end_turn"),
    ]
    server.script = [a_sse(t) if stream else Reply(t) for t in turns]
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
    assert result.outcome.kind == "completed"
    assert result.output.startswith("C-1042 est expediee")
    bodies = server.bodies()
    assert len(bodies) == 3 and all(anthropic_pairing_ok(b) for b in bodies)
    second = bodies[1]
    assert second["system"][0]["text"] == "Answer in French."
    results = second["messages"][2]["content"]
    assert [b["tool_use_id"] for b in results] == ["toolu_1", "toolu_2"]
    assert json.loads(results[0]["content"])["statut"] == "expediee"
    assert results[1]["is_error"] is True and "No order C-9999" in results[1]["content"]
    assert bodies[2]["messages"][4]["content"][0]["content"] == "98.89 USD"
    assert result.usage.requests == 3
    if stream:
        assert any(isinstance(e, TextDelta) for e in seen)


async def test_history_is_converted_once_per_message(server: FakeProvider) -> None:
    turns = [
        a_message(a_call(f"t{i}", "lire_commande", numero="C-1042"), stop="tool_use")
        for i in range(4)
    ]
    server.script = [Reply(t) for t in turns] + [Reply(a_message(a_text("done")))]
    c = client(server)
    result = await Agent(c, [read_order], limits=Limits(max_turns=10)).run("go")
    assert result.outcome.kind == "completed"
    # 5 requests over a history that grew to 9 messages: each message converted once,
    # although a naive adapter would have converted 1 + 3 + 5 + 7 + 9 = 25 times.
    assert len(server.requests) == 5
    assert c.wire.conversions == len(result.transcript) - 1  # the last reply is never sent


def test_wire_cache_checks_identity_and_stays_bounded() -> None:
    c = AnthropicClient("m", api_key="k", cache_size=2)
    a, b, d = Message.user("a"), Message.user("b"), Message.user("d")
    for m in (a, b, a, b):
        c.request_body([m], [], ChatOptions())
    assert c.wire.conversions == 2
    c.request_body([d], [], ChatOptions())  # evicts the least recently used (a)
    assert len(c.wire) == 2
    c.request_body([a], [], ChatOptions())
    assert c.wire.conversions == 4
    equal_but_new = Message.user("a")
    c.request_body([equal_but_new], [], ChatOptions())
    assert c.wire.conversions == 5  # same value, another object: converted, never confused


def test_thinking_blocks_are_sent_back_before_the_calls() -> None:
    from tether.providers.anthropic import parse_message

    data = a_message(
        {"type": "thinking", "thinking": "hmm", "signature": "sig"},
        a_call("t1", "lire_commande", numero="C-1042"),
        stop="tool_use",
    )
    reply = parse_message(data)
    assert reply.message.parts == (ToolCall("t1", "lire_commande", {"numero": "C-1042"}),)
    history = [Message.user("q"), reply.message, Message.results([ToolResult("t1", "ok")])]
    body = AnthropicClient("m", api_key="k", cache=False).request_body(history, [], ChatOptions())
    assert body["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "hmm",
        "signature": "sig",
    }
    assert isinstance(reply.message.parts[0], ToolCall) and not isinstance(
        reply.message.parts[0], Text
    )


def test_provider_only_blocks_are_sent_back_verbatim_and_in_place() -> None:
    from tether.providers.anthropic import parse_message

    compaction = {"type": "compaction", "content": "Summary of the earlier turns."}
    server_call = {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}}
    server_result = {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": []}
    data = a_message(
        compaction,
        {"type": "text", "text": "Searching."},
        server_call,
        server_result,
        a_call("t1", "lire_commande", numero="C-1042"),
        stop="tool_use",
    )
    reply = parse_message(data)
    assert [type(p).__name__ for p in reply.message.parts] == ["Text", "ToolCall"]
    history = [Message.user("q"), reply.message, Message.results([ToolResult("t1", "ok")])]
    body = AnthropicClient("m", api_key="k", cache=False).request_body(history, [], ChatOptions())
    sent = body["messages"][1]["content"]
    assert [b["type"] for b in sent] == [
        "compaction",
        "text",
        "server_tool_use",
        "web_search_tool_result",
        "tool_use",
    ]
    assert sent[0] == compaction and sent[2] == server_call and sent[3] == server_result
    # and the whole state survives a JSON round trip (a resumed run sends them back too)
    from tether.messages import dumps_history, loads_history

    again = AnthropicClient("m", api_key="k", cache=False).request_body(
        loads_history(dumps_history(history)), [], ChatOptions()
    )
    assert again["messages"][1]["content"] == sent


def test_streamed_compaction_block_is_assembled_and_kept() -> None:
    from tether.providers.anthropic import _StreamAssembler, parse_message

    events = [
        {"type": "message_start", "message": {"role": "assistant", "usage": {}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "compaction"}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "compaction_delta", "content": "Summary ", "encrypted_content": "e1"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "compaction_delta", "content": "of the past."},
        },
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
    ]
    assembler = _StreamAssembler()
    for event in events:
        assembler.feed(event)
    reply = parse_message(assembler.message())
    assert reply.message.text == "Hi"
    history = [Message.user("q"), reply.message]
    body = AnthropicClient("m", api_key="k", cache=False).request_body(history, [], ChatOptions())
    assert body["messages"][1]["content"][0] == {
        "type": "compaction",
        "content": "Summary of the past.",
        "encrypted_content": "e1",
    }
