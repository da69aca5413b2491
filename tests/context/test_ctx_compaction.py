"""Compaction: a summary replaces older turns; pairs stay intact; overflow retries once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Annotated

import anthropic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.clients import ChatClient, ChatOptions, DelegatingChatClient, StreamChunk
from tether.context.compaction import SUMMARY_HEADER, CompactHistory
from tether.errors import ConfigError, ContextWindowExceeded
from tether.history import check
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message, Text, ToolCall, ToolResult, Usage
from tether.providers.anthropic import AnthropicClient
from tether.providers.faults import FaultyClient
from tether.providers.scripted import ChatResponse, ScriptedClient, call_reply, text_reply
from tether.tokens import estimate_tokens
from tether.tools import ToolSpec, tool

PAGES = 40
SUMMARY_USAGE = Usage(input_tokens=1000, output_tokens=50, requests=1)


@tool(thread=False)
def fetch(n: Annotated[int, "Page number."]) -> str:
    """Returns page n of a long report, about 2 KB. Used to fill the context. Read-only."""
    return f"page {n}: " + ("lorem ipsum " * 170)


def reader(history: Sequence[Message]) -> ChatResponse:
    """Reads pages 1..PAGES (two per turn on even pages), then answers."""
    calls = [c for m in history for c in m.tool_calls]
    last = int(calls[-1].arguments["n"]) if calls else 0
    if last >= PAGES:
        return text_reply("read everything")
    if last % 2 == 0 and last + 2 <= PAGES:
        return call_reply(("fetch", {"n": last + 1}), ("fetch", {"n": last + 2}), text="two")
    return call_reply(("fetch", {"n": last + 1}))


def summariser() -> ScriptedClient:
    def write(history: Sequence[Message]) -> ChatResponse:
        pages = [line.split()[1] for line in history[-1].text.splitlines() if "] page " in line]
        return text_reply(f"read pages up to {pages[-1] if pages else '?'}", usage=SUMMARY_USAGE)

    return ScriptedClient(write)


async def test_threshold_compaction_keeps_pairs_and_the_newest_turns_verbatim() -> None:
    model, summary = ScriptedClient(reader), summariser()
    compact = CompactHistory(model, summarizer=summary, trigger_tokens=6000)
    result = await Agent(compact, [fetch], limits=Limits(max_turns=100)).run("Read it all.")
    assert result.outcome.completed
    assert 2 <= len(compact.compactions) <= 8
    transcript = result.transcript
    for request in model.requests:
        sent = request.messages
        assert check(sent) == []
        assert estimate_tokens(sent) <= 6000
        if any(SUMMARY_HEADER in m.text for m in sent):
            assert sent[0].role == "user" and sent[0].parts[0] == Text("Read it all.")
            # the tail is the transcript's own messages, unchanged
            n = len(sent) - 1
            assert any(
                list(transcript[i : i + n]) == list(sent[1:]) for i in range(len(transcript))
            )
    for c in compact.compactions:
        assert c.reason == "threshold" and c.tokens_after < c.tokens_before
    # summaries were requested with the earlier summary and the new turns only
    assert "read pages up to" in summary.requests[-1].messages[0].text


async def test_summary_usage_is_added_to_the_run_usage() -> None:
    model, summary = ScriptedClient(reader), summariser()
    compact = CompactHistory(model, summarizer=summary, trigger_tokens=6000)
    result = await Agent(compact, [fetch], limits=Limits(max_turns=100)).run("Read it all.")
    n = len(compact.compactions)
    assert n >= 2 and len(summary.requests) == n
    assert result.usage.requests == len(model.requests) + n
    assert result.usage.output_tokens >= n * SUMMARY_USAGE.output_tokens
    plain = ScriptedClient(reader)
    baseline = Agent(plain, [fetch], limits=Limits(max_turns=100))
    assert (await baseline.run("Read it all.")).usage.requests == len(plain.requests)


async def test_overflow_compacts_and_retries_once() -> None:
    model = ScriptedClient(reader)
    faulty = FaultyClient(model, {12: "context_exceeded"})
    compact = CompactHistory(faulty, summarizer=summariser(), trigger_tokens=10**6)
    result = await Agent(compact, [fetch], limits=Limits(max_turns=100)).run("Read it all.")
    assert result.outcome.completed
    assert [c.reason for c in compact.compactions] == ["overflow"]
    assert compact.compactions[0].request == 12
    retried = model.requests[11].messages  # the retry of request 12 reached the model
    assert SUMMARY_HEADER in retried[0].text and check(retried) == []


async def test_a_context_stop_reason_compacts_and_retries_once() -> None:
    model = ScriptedClient(reader)
    faulty = FaultyClient(model, {12: "context_stop"})  # a reply cut by a full window
    compact = CompactHistory(faulty, summarizer=summariser(), trigger_tokens=10**6)
    result = await Agent(compact, [fetch], limits=Limits(max_turns=100)).run("Read it all.")
    assert result.outcome.completed
    assert [c.reason for c in compact.compactions] == ["overflow"]
    retried = model.requests[11].messages
    assert SUMMARY_HEADER in retried[0].text and check(retried) == []
    # the cut reply was not kept; its usage was (one more request than the model served)
    assert all(m.text != "The context" for m in result.transcript)
    assert result.usage.requests == len(model.requests) + 1 + 1  # + the cut reply + summary


async def test_a_second_overflow_is_not_retried_again() -> None:
    model = ScriptedClient(reader)
    faulty = FaultyClient(model, {12: "context_exceeded", 13: "context_exceeded"})
    compact = CompactHistory(faulty, summarizer=summariser(), trigger_tokens=10**6)
    result = await Agent(compact, [fetch], limits=Limits(max_turns=100)).run("Read it all.")
    assert result.outcome.kind == "context_exceeded"
    assert faulty.request_count == 13 and len(compact.compactions) == 1
    assert result.turns == 12


async def test_overflow_with_nothing_to_compact_fails_clearly() -> None:
    faulty = FaultyClient(ScriptedClient(reader), {1: "context_exceeded"})
    compact = CompactHistory(faulty, summarizer=summariser(), trigger_tokens=10**6)
    result = await Agent(compact, [fetch]).run("Read it all.")
    assert result.outcome.kind == "context_exceeded"
    assert "no older turns left to compact" in result.outcome.reason


async def test_a_rewritten_history_drops_the_old_summary() -> None:
    compact = CompactHistory(ScriptedClient(reader), summarizer=summariser(), trigger_tokens=6000)
    await Agent(compact, [fetch], limits=Limits(max_turns=100)).run("Read it all.")
    assert compact.summary is not None
    fresh = [Message.user("another task")]
    assert await compact.prepare(fresh, [], ChatOptions()) == (fresh, ChatOptions())
    assert compact.summary is None


class StreamOverflow(DelegatingChatClient):
    """Streams from ``inner`` but raises a context overflow on the given requests."""

    def __init__(self, inner: ChatClient, at: set[int]) -> None:
        super().__init__(inner)
        self.at = at
        self.count = 0

    async def stream(  # type: ignore[override]
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        self.count += 1
        if self.count in self.at:
            raise ContextWindowExceeded()
        async for chunk in self.inner.stream(messages, tools, options):
            yield chunk


async def test_streaming_retries_once_on_overflow_before_any_chunk() -> None:
    overflow = StreamOverflow(ScriptedClient(reader), {12})
    compact = CompactHistory(overflow, summarizer=summariser(), trigger_tokens=10**6)
    events: list[object] = []
    agent = Agent(
        compact, [fetch], limits=Limits(max_turns=100), listeners=[events.append], stream=True
    )
    result = await agent.run("Read it all.")
    assert result.outcome.completed and len(compact.compactions) == 1
    assert overflow.count == result.turns + 1
    assert result.usage.output_tokens >= SUMMARY_USAGE.output_tokens
    twice = StreamOverflow(ScriptedClient(reader), {12, 13})
    compact = CompactHistory(twice, summarizer=summariser(), trigger_tokens=10**6)
    agent = Agent(
        compact, [fetch], limits=Limits(max_turns=100), listeners=[events.append], stream=True
    )
    assert (await agent.run("Read it all.")).outcome.kind == "context_exceeded"


# --- the cut never separates a call from its results -----------------------------------

turns = st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=25)


def history_of(calls_per_turn: list[int]) -> list[Message]:
    history = [Message.user("task")]
    n = 0
    for calls in calls_per_turn:
        if calls == 0:
            history.append(Message.assistant("thinking " * 30))
            history.append(Message.user("go on"))
            continue
        ids = [f"c{n + i}" for i in range(calls)]
        n += calls
        history.append(Message.assistant(*(ToolCall(i, "fetch", {"n": 1}) for i in ids)))
        history.append(Message.results(ToolResult(i, "r " * 200) for i in ids))
    return history


@settings(max_examples=60, deadline=None)
@given(turns, st.integers(min_value=0, max_value=2000), st.booleans())
async def test_compacted_history_is_always_valid(
    calls_per_turn: list[int], keep: int, keep_first: bool
) -> None:
    history = history_of(calls_per_turn)
    compact = CompactHistory(
        ScriptedClient([]),
        summarizer=ScriptedClient(lambda h: "short summary"),
        trigger_tokens=1,
        keep_recent_tokens=keep,
        keep_first=keep_first,
    )
    sent, _ = await compact.prepare(history, [], ChatOptions())
    assert check(sent) == []
    if compact.summary is not None:
        tail = history[compact._covered :]
        assert tail[0].role != "tool"
        if tail[0].role == "user":  # merged into the summary's user message
            assert sent[0].parts[-len(tail[0].parts) :] == tail[0].parts
            assert sent[1:] == tail[1:]
        else:
            assert sent[1:] == tail


def test_server_side_compaction_needs_an_adapter_that_round_trips_blocks() -> None:
    sdk = anthropic.AsyncAnthropic(
        api_key="test",
        base_url="http://127.0.0.1:9",
        default_headers={"anthropic-beta": "compact-2026-01-12"},
    )
    adapter = AnthropicClient("claude-test", sdk=sdk)
    CompactHistory(adapter, server_side=True)  # this adapter sends compaction blocks back
    adapter.round_trips_compaction = False  # type: ignore[misc]  # one that would not
    with pytest.raises(ConfigError, match="compaction blocks"):
        CompactHistory(adapter, server_side=True)
    with pytest.raises(ConfigError, match="Anthropic adapter"):
        CompactHistory(ScriptedClient([]), server_side=True)


async def test_server_side_compaction_sets_the_edit_when_supported() -> None:
    sdk = anthropic.AsyncAnthropic(
        api_key="test",
        base_url="http://127.0.0.1:9",
        default_headers={"anthropic-beta": "compact-2026-01-12"},
    )
    adapter = AnthropicClient("claude-test", sdk=sdk)
    compact = CompactHistory(adapter, server_side=True, trigger_tokens=150_000)
    history = [Message.user("go")]
    sent, options = await compact.prepare(history, [], ChatOptions())
    assert sent == history
    edit = adapter.request_body(sent, [], options)["context_management"]["edits"][0]
    assert edit["type"] == "compact_20260112"
    assert edit["trigger"] == {"type": "input_tokens", "value": 150_000}


async def test_context_window_exceeded_type_is_kept() -> None:
    with pytest.raises(ContextWindowExceeded):
        await CompactHistory(
            FaultyClient(ScriptedClient(reader), {1: "context_exceeded"}),
            summarizer=summariser(),
        ).complete([Message.user("x")], [], ChatOptions())


async def test_clearing_outside_compaction_work_together() -> None:
    from tether.clients import ClientPipeline
    from tether.context.clearing import ClearOldResults

    model, summary = ScriptedClient(reader), summariser()
    client = (
        ClientPipeline(model)
        .use(ClearOldResults, keep=3, trigger_tokens=9000, target_tokens=4000)
        .use(CompactHistory, summarizer=summary, trigger_tokens=6000, keep_recent_tokens=1500)
        .build()
    )
    result = await Agent(client, [fetch], limits=Limits(max_turns=100)).run("Read it all.")
    assert result.outcome.completed
    assert all(check(r.messages) == [] for r in model.requests)
    assert all(estimate_tokens(r.messages) <= 6000 for r in model.requests)
    assert isinstance(client, ClearOldResults) and isinstance(client.inner, CompactHistory)
    # results stubbed by the outer wrapper do not make compaction start over
    covered = [c.messages for c in client.inner.compactions]
    assert len(client.clearings) >= 1 and len(covered) >= 2
    assert covered == sorted(set(covered)) and len(summary.requests) == len(covered)
