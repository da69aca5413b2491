"""Runs stopped at random points, with sync and async tools that record what they did: every
result in the transcript matches what the tool actually did."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Annotated, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.history import check
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import ToolResult
from tether.providers.scripted import ScriptedClient, call_reply
from tether.tools import RunContext, tool


@dataclass
class Ledger:
    """What each call really did, keyed by call id."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    started: set[str] = field(default_factory=set)
    finished: dict[str, str] = field(default_factory=dict)

    def start(self, call_id: str) -> None:
        with self.lock:
            self.started.add(call_id)

    def finish(self, call_id: str, value: str) -> str:
        with self.lock:
            self.finished[call_id] = value
        return value


def make_tools(ledger: Ledger) -> list[Any]:
    @tool
    async def work_async(ms: Annotated[int, "Milliseconds."], ctx: RunContext[None]) -> str:
        """Async work that takes ``ms`` milliseconds."""
        assert ctx.call is not None
        ledger.start(ctx.call.id)
        await asyncio.sleep(ms / 1000)
        return ledger.finish(ctx.call.id, f"async {ctx.call.id}")

    @tool
    def work_sync(ms: Annotated[int, "Milliseconds."], ctx: RunContext[None]) -> str:
        """Sync work, in a worker thread, that takes ``ms`` milliseconds."""
        assert ctx.call is not None
        ledger.start(ctx.call.id)
        time.sleep(ms / 1000)
        return ledger.finish(ctx.call.id, f"sync {ctx.call.id}")

    return [work_async, work_sync]


calls = st.tuples(st.sampled_from(["work_async", "work_sync"]), st.integers(0, 40))
turns = st.lists(st.lists(calls, min_size=1, max_size=4), min_size=1, max_size=3)


def check_truthful(results: list[ToolResult], ledger: Ledger) -> None:
    for r in results:
        if r.status == "ok":
            assert ledger.finished.get(r.call_id) == r.content
        elif r.status == "not_run":
            assert r.call_id not in ledger.started
        elif r.status == "abandoned":
            assert r.call_id in ledger.started
        else:
            assert r.status == "interrupted", r


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    script=turns,
    stop_after_ms=st.integers(0, 80),
    how=st.sampled_from(["handle", "wall", "task"]),
    concurrency=st.integers(1, 3),
)
def test_every_result_matches_what_the_tool_did(
    script: list[list[tuple[str, int]]], stop_after_ms: int, how: str, concurrency: int
) -> None:
    ledger = Ledger()
    replies = [call_reply(*[(name, {"ms": ms}) for name, ms in turn]) for turn in script]
    wall = stop_after_ms / 1000 if how == "wall" else None
    limits = Limits(max_wall_seconds=wall, max_concurrency=concurrency)
    agent = Agent(ScriptedClient([*replies, "done"]), make_tools(ledger), limits=limits)
    appended: list[Any] = []
    agent.listeners.append(appended.append)

    async def drive() -> list[ToolResult]:
        if how == "task":
            task = asyncio.create_task(agent.run("q"))
            await asyncio.sleep(stop_after_ms / 1000)
            task.cancel()
            try:
                result = await task
                transcript = result.transcript
            except asyncio.CancelledError:
                transcript = tuple(e.message for e in appended if hasattr(e, "message"))
        elif how == "handle":
            handle = agent.start("q")
            await asyncio.sleep(stop_after_ms / 1000)
            handle.cancel()
            transcript = (await handle).transcript
        else:
            transcript = (await agent.run("q")).transcript
        if how != "task":
            assert check(transcript) == []
        return [r for m in transcript for r in m.tool_results]

    results = asyncio.run(drive())
    time.sleep(0.06)  # let abandoned threads end: a not_run call must never start later
    with ledger.lock:
        check_truthful(results, ledger)
        assert len({r.call_id for r in results}) == len(results)  # one result per call
