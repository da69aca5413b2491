"""A run stopped mid-turn tells the truth about each call, and cancellation from outside
behaves as asyncio expects."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Annotated, Any

import pytest

from tether.events import Event, MessageAppended, RunFinished
from tether.history import check
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message
from tether.providers.scripted import ScriptedClient, call_reply
from tether.tools import FunctionTool, tool


def two_call_agent(effects: list[str], **limits: Any) -> Agent[None]:
    @tool
    async def refund(amount: Annotated[float, "Amount."]) -> str:
        """Refund; irreversible, fast."""
        effects.append(f"refund {amount}")
        return f"refunded {amount}"

    @tool
    async def slow_lookup(seconds: Annotated[float, "How long."]) -> str:
        """Look something up, slowly."""
        effects.append("lookup started")
        await asyncio.sleep(seconds)
        effects.append("lookup finished")
        return "found"

    script = [call_reply(("refund", {"amount": 9.0}), ("slow_lookup", {"seconds": 30}))]
    return Agent(ScriptedClient(script), [refund, slow_lookup], limits=Limits(**limits))


async def wait_for(condition: Any) -> None:
    """Poll ``condition`` (tools record effects in lists) for up to ten seconds."""
    async with asyncio.timeout(10):
        while not condition():  # noqa: ASYNC110 -- the effects are plain lists
            await asyncio.sleep(0.005)


async def test_cancel_keeps_the_finished_call_and_marks_the_other_interrupted() -> None:
    effects: list[str] = []
    handle = two_call_agent(effects).start("refund and look up")
    await wait_for(lambda: "lookup started" in effects and "refund 9.0" in effects)
    handle.cancel()
    result = await handle
    assert result.outcome.kind == "cancelled"
    refund, lookup = result.transcript[-1].tool_results
    assert (refund.status, refund.content) == ("ok", "refunded 9.0")
    assert lookup.status == "interrupted"
    assert "may or may not have taken effect" in lookup.content
    assert "Not executed" not in lookup.content
    assert check(result.transcript) == []


async def test_wall_limit_keeps_the_finished_call_and_marks_the_other_interrupted() -> None:
    effects: list[str] = []
    result = await two_call_agent(effects, max_wall_seconds=0.5).run("refund and look up")
    assert (result.outcome.kind, result.outcome.limit) == ("budget_exceeded", "max_wall_seconds")
    refund, lookup = result.transcript[-1].tool_results
    assert (refund.status, refund.content) == ("ok", "refunded 9.0")
    assert lookup.status == "interrupted" and "wall-time limit" in lookup.content


async def test_a_call_that_never_started_is_not_run() -> None:
    effects: list[str] = []
    agent = two_call_agent(effects, max_concurrency=1)
    agent.client = ScriptedClient(
        [call_reply(("slow_lookup", {"seconds": 30}), ("refund", {"amount": 9.0}))]
    )
    handle = agent.start("q")
    await wait_for(lambda: "lookup started" in effects)
    handle.cancel()
    result = await handle
    lookup, refund = result.transcript[-1].tool_results
    assert lookup.status == "interrupted"
    assert refund.status == "not_run" and "before this call started" in refund.content
    assert effects == ["lookup started"]  # the refund never ran


def test_run_sync_returns_at_the_wall_limit_and_reports_the_thread_abandoned() -> None:
    release = threading.Event()
    finished: list[bool] = []

    @tool
    def stuck(reason: Annotated[str, "Why."]) -> str:
        """A sync tool that ignores its run's deadline."""
        release.wait(30)
        finished.append(True)
        return "done"

    agent = Agent(
        ScriptedClient([call_reply(("stuck", {"reason": "x"}))]),
        [stuck],
        limits=Limits(max_wall_seconds=0.3),
    )
    result = agent.run_sync("q")
    assert finished == []  # run_sync did not wait for the thread
    release.set()
    (res,) = result.transcript[-1].tool_results
    assert result.outcome.kind == "budget_exceeded"
    assert res.status == "abandoned" and "may still take effect" in res.content
    deadline = time.monotonic() + 10
    while not finished and time.monotonic() < deadline:
        time.sleep(0.01)
    assert finished == [True]  # it did take effect, later: the result said it might


def test_a_sync_tool_timeout_says_the_thread_still_runs() -> None:
    release = threading.Event()

    @tool
    def stuck(reason: Annotated[str, "Why."]) -> str:
        """A sync tool that ignores its timeout."""
        release.wait(30)
        return "done"

    agent = Agent(
        ScriptedClient([call_reply(("stuck", {"reason": "x"})), "ok"]),
        [stuck],
        limits=Limits(tool_timeout_seconds=0.2),
    )
    result = agent.run_sync("q")
    release.set()
    res = result.transcript[2].tool_results[0]
    assert res.status == "error" and "still running in its worker thread" in res.content


# --- cancellation from outside ------------------------------------------------------------


def hanging_agent(events: list[Event]) -> Agent[None]:
    @tool
    async def hang(seconds: Annotated[float, "S."]) -> str:
        """Hang."""
        await asyncio.sleep(seconds)
        return "late"

    return Agent(
        ScriptedClient([call_reply(("hang", {"seconds": 30}))]), [hang], listeners=[events.append]
    )


def closing_message(events: list[Event]) -> Message:
    appended = [e.message for e in events if isinstance(e, MessageAppended)]
    return appended[-1]


async def test_cancelling_the_awaiting_task_raises_and_closes_the_transcript() -> None:
    events: list[Event] = []
    task = asyncio.create_task(hanging_agent(events).run("q"))
    await wait_for(lambda: any(isinstance(e, MessageAppended) for e in events))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    finished = [e for e in events if isinstance(e, RunFinished)]
    assert [f.outcome.kind for f in finished] == ["cancelled"]
    closing = closing_message(events)
    assert closing.role == "tool" and closing.tool_results[0].status == "interrupted"


async def test_asyncio_timeout_and_wait_for_around_a_run_raise() -> None:
    events: list[Event] = []

    async def bounded() -> None:
        async with asyncio.timeout(0.2):
            await hanging_agent(events).run("q")

    with pytest.raises(TimeoutError):
        await bounded()
    assert closing_message(events).tool_results[0].status == "interrupted"
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(hanging_agent([]).run("q"), 0.2)


async def test_a_task_group_cancels_the_run_when_a_sibling_fails() -> None:
    events: list[Event] = []

    async def fail_soon() -> None:
        await asyncio.sleep(0.1)
        raise ValueError("sibling failed")

    async def together() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(hanging_agent(events).run("q"))
            group.create_task(fail_soon())

    with pytest.raises(ExceptionGroup) as caught:
        await together()
    assert caught.group_contains(ValueError)
    assert [e.outcome.kind for e in events if isinstance(e, RunFinished)] == ["cancelled"]


async def test_cancelling_a_handle_after_the_run_ended_does_nothing(
    tools: list[FunctionTool],
) -> None:
    handle = Agent(ScriptedClient(["hello"]), tools).start("q")
    result = await handle
    assert handle.done() and not handle.cancel()
    assert result.outcome.kind == "completed" and result.output == "hello"


async def test_a_handle_cancelled_before_the_run_began_is_typed(
    tools: list[FunctionTool],
) -> None:
    handle = Agent(ScriptedClient(["hello"]), tools).start("q")
    assert handle.cancel()
    result = await handle
    assert result.outcome.kind == "cancelled"
    assert [m.role for m in result.transcript] == ["user"]
