"""Clearing old tool results: stubs under the same id, rarely and a lot, stable prefix."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Annotated

import anthropic
import pytest

from tether.clients import ChatOptions
from tether.context.clearing import STUB, ClearOldResults
from tether.errors import ConfigError
from tether.history import check
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message, ToolCall, ToolResult, dumps_history
from tether.providers.anthropic import AnthropicClient
from tether.providers.scripted import ChatResponse, ScriptedClient, call_reply, text_reply
from tether.tokens import estimate_tokens
from tether.tools import tool

PAGES = 80


@tool(thread=False)
def fetch(n: Annotated[int, "Page number."]) -> str:
    """Returns page n of a long report, about 2 KB. Used to fill the context. Read-only."""
    return f"page {n}: " + ("lorem ipsum " * 170)


@tool(thread=False)
def pinned(n: Annotated[int, "Any number."]) -> str:
    """Returns a long text that must never be cleared. Used to test exclusions. Read-only."""
    return "pinned " * 300


def reader(history: Sequence[Message]) -> ChatResponse:
    """Reads pages 1..PAGES, one per turn, then answers (with a pinned call at page 5)."""
    calls = [c for m in history for c in m.tool_calls if c.name == "fetch"]
    last = int(calls[-1].arguments["n"]) if calls else 0
    if last == 5 and history[-2].tool_calls[0].name == "fetch":
        return call_reply(("pinned", {"n": 1}))
    if last >= PAGES:
        return text_reply("read everything")
    return call_reply(("fetch", {"n": last + 1}))


async def run_clearing(**kwargs: object) -> tuple[ScriptedClient, ClearOldResults, object]:
    model = ScriptedClient(reader)
    clearing = ClearOldResults(model, **kwargs)  # type: ignore[arg-type]
    agent = Agent(clearing, [fetch, pinned], limits=Limits(max_turns=200))
    result = await agent.run("Read the whole report.")
    assert result.outcome.completed
    return model, clearing, result


async def test_stubs_keep_call_ids_and_pass_the_history_check() -> None:
    model, clearing, result = await run_clearing(keep=3, trigger_tokens=8000, target_tokens=2000)
    assert clearing.cleared, "the run should have cleared something"
    for request in model.requests:
        assert check(request.messages) == []
        ids = {c.id for m in request.messages for c in m.tool_calls}
        results = [r for m in request.messages for r in m.tool_results]
        assert {r.call_id for r in results} == ids  # every call still has its result
        for r in results:
            assert r.content == STUB or r.content.startswith(("page", "pinned"))
            assert r.content != STUB or r.call_id in clearing.cleared
    last = model.requests[-1].messages
    stubbed = [r.call_id for m in last for r in m.tool_results if r.content == STUB]
    assert set(stubbed) == clearing.cleared
    # the loop's own transcript is never edited
    assert all(r.content != STUB for m in result.transcript for r in m.tool_results)  # type: ignore[attr-defined]


async def test_newest_results_are_never_cleared() -> None:
    model, _, _ = await run_clearing(keep=4, trigger_tokens=8000, target_tokens=2000)
    for request in model.requests:
        results = [r for m in request.messages for r in m.tool_results]
        assert all(r.content != STUB for r in results[-4:])


async def test_hysteresis_clears_rarely_and_a_lot() -> None:
    model, clearing, _ = await run_clearing(keep=3, trigger_tokens=8000, target_tokens=2000)
    requests = len(model.requests)
    assert requests == PAGES + 2
    # each clearing brings the request from over 8,000 down to about 2,000 tokens plus
    # the stubs left behind; each page adds ~520 tokens, so about one clearing per 10 turns
    assert 4 <= len(clearing.clearings) <= requests // 10
    for c in clearing.clearings:
        # down to the target, plus the stubs and calls that stay (~30 tokens each)
        assert c.tokens_before > 8000 and c.tokens_after <= 2000 + 30 * c.request
        assert c.cleared >= 8
    turns = [c.request for c in clearing.clearings]
    assert all(b - a >= 8 for a, b in itertools.pairwise(turns))
    # every request stays under the trigger after the edit
    for request in model.requests:
        assert estimate_tokens(request.messages) <= 8000


async def test_prefix_is_byte_identical_between_clearings() -> None:
    model, clearing, _ = await run_clearing(keep=3, trigger_tokens=8000, target_tokens=2000)
    clearing_turns = {c.request for c in clearing.clearings}
    stable = 0
    for i in range(1, len(model.requests)):
        before, after = model.requests[i - 1].messages, model.requests[i].messages
        if i + 1 in clearing_turns:
            assert dumps_history(after[: len(before)]) != dumps_history(before)
            continue
        assert dumps_history(after[: len(before)]) == dumps_history(before)
        stable += 1
    assert stable >= len(model.requests) - 1 - len(clearing_turns)


async def test_excluded_tools_keep_their_results() -> None:
    model, _, _ = await run_clearing(
        keep=3, trigger_tokens=8000, target_tokens=2000, exclude_tools=("pinned",)
    )
    last = model.requests[-1].messages
    names = {c.id: c.name for m in last for c in m.tool_calls}
    pinned_results = [r for m in last for r in m.tool_results if names[r.call_id] == "pinned"]
    assert pinned_results and all(r.content != STUB for r in pinned_results)


async def test_no_clearing_below_the_trigger() -> None:
    model, clearing, _ = await run_clearing(keep=3, trigger_tokens=10**6)
    assert clearing.clearings == [] and clearing.cleared == set()
    assert all(r.content != STUB for m in model.requests[-1].messages for r in m.tool_results)


def test_bad_thresholds_are_refused() -> None:
    with pytest.raises(ValueError, match="target < trigger"):
        ClearOldResults(ScriptedClient([]), trigger_tokens=100, target_tokens=100)


def _anthropic(beta: str | None) -> AnthropicClient:
    headers = {"anthropic-beta": beta} if beta else None
    sdk = anthropic.AsyncAnthropic(
        api_key="test", base_url="http://127.0.0.1:9", default_headers=headers
    )
    return AnthropicClient("claude-test", sdk=sdk)


def test_server_side_needs_the_anthropic_adapter_and_its_beta_header() -> None:
    with pytest.raises(ConfigError, match="Anthropic adapter"):
        ClearOldResults(ScriptedClient([]), server_side=True)
    with pytest.raises(ConfigError, match="context-management-2025-06-27"):
        ClearOldResults(_anthropic(None), server_side=True)


def test_server_side_sets_context_management_and_leaves_the_history_alone() -> None:
    adapter = _anthropic("context-management-2025-06-27")
    clearing = ClearOldResults(
        adapter, keep=2, trigger_tokens=30_000, target_tokens=10_000, server_side=True
    )
    history = [
        Message.user("go"),
        Message.assistant(ToolCall("t1", "fetch", {"n": 1})),
        Message.results([ToolResult("t1", "x" * 10)]),
    ]
    sent, options = clearing.prepare(history, [fetch.spec], ChatOptions())
    assert sent == history
    body = adapter.request_body(sent, [fetch.spec], options)
    assert body["context_management"] == {
        "edits": [
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 30_000},
                "keep": {"type": "tool_uses", "value": 2},
                "clear_at_least": {"type": "input_tokens", "value": 20_000},
            }
        ]
    }
    json.dumps(body)  # the body stays JSON
