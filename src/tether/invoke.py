"""One turn's tool calls: rule on each, run the allowed ones, turn every failure into a result.

Every call gets exactly one :class:`ToolResult`, in call order. First each call gets one
ruling (:mod:`tether.rulings`): ``deny`` is a ``blocked`` result, ``ask`` makes it pending
(unless a human already decided it: a decision is final), ``allow`` lets it run. Then the
allowed calls run concurrently (bounded), except calls of a ``serial`` tool, which run one
at a time in the model's order. An unknown tool, malformed or invalid arguments, a raising
tool and a timeout become error results the model can read.

The invoker remembers which calls started and which finished, so that a run interrupted
mid-turn (cancelled, out of wall time) reports each call truthfully: a finished call keeps
its result, a started one is ``interrupted`` (or ``abandoned`` while its thread runs on),
and only a call that never started is ``not_run``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.errors import ToolFailure
from tether.events import CallRuled, Listener, ToolCallFinished, ToolCallStarted
from tether.labels import cap_text as cap_text  # labelled results are cut inside
from tether.limits import Limits
from tether.messages import ResultStatus, ToolCall, ToolResult
from tether.outcomes import Decision, PendingApproval, arguments_hash
from tether.rulings import ALLOW, CallPolicy, Ruling, strictest
from tether.serial_keys import Resource, serial_resource
from tether.tools import RunContext, Tool

REFUSED = "Refused by the user; do not retry this call, propose another way."
BLOCKED = (
    "Not allowed: {reason} It was blocked before it ran; do not retry it, propose another way."
)
NOT_RUN_TRUNCATED = "Not executed: the response was cut off (output token limit)."
NOT_RUN_STOPPED = "Not executed: the run stopped ({why}) before this call started."
INTERRUPTED = (
    "Interrupted: the run stopped ({why}) while this call was running; "
    "it may or may not have taken effect. Check before doing it again."
)
ABANDONED = (
    "Abandoned: the run stopped ({why}) while this call was still running in its worker "
    "thread; it may still take effect. Check before doing it again."
)
CUT_HINT = "ask for less (a filter, a page) to see the rest"

log = logging.getLogger("tether.tools")
"""Each tool that raises is logged here at ERROR with its traceback (the model reads only
``Tool 'x' failed.`` unless ``Limits.detailed_errors``)."""


ASK = Ruling("ask", "this tool needs a human's approval", "requires_approval")


def blocked_result(call_id: str, ruling: Ruling) -> ToolResult:
    """The result of a call a policy denied (status ``blocked``)."""
    reason = ruling.reason.rstrip(".") + "." if ruling.reason else "a policy refuses this call."
    return ToolResult(call_id, BLOCKED.format(reason=reason), status="blocked")


def denied_result(call_id: str, reason: str = "") -> ToolResult:
    """The result of a call a human refused (status ``denied``)."""
    text = f"{REFUSED} Reason: {reason}" if reason else REFUSED
    return ToolResult(call_id, text, status="denied")


@dataclass(slots=True)
class TurnOutcome:
    """Results ready now (call order kept; ``None`` where pending), pending approvals, and
    what was decided about the calls (rulings other than a plain allow, human decisions)."""

    results: list[ToolResult | None]
    pending: list[PendingApproval]
    rulings: dict[str, Ruling] = field(default_factory=dict)
    decisions: dict[str, Decision] = field(default_factory=dict)


@dataclass(slots=True)
class _Progress:
    ctx: RunContext[Any]
    started: bool = False
    result: ToolResult | None = None


_serial_locks: weakref.WeakValueDictionary[tuple[Any, ...], asyncio.Lock] = (
    weakref.WeakValueDictionary()
)


HELD = Ruling(
    "ask",
    "an earlier call of this turn on the same serial key waits for a human; this one runs "
    "after it, in the model's order",
    "serial_order",
)
"""Why a call that needs no approval waits: it shares a serial key with an earlier pending
call. On resume it is ruled on again (a decision for it is honoured but not needed)."""


def _resource(tool: Tool | None, call: ToolCall) -> Resource | None:
    """The serial resource a call holds, if its tool declares one."""
    if tool is None or not tool.serial or call.malformed:
        return None
    return serial_resource(tool.serial, id(tool), call.arguments)


def _serial_lock(tool: Tool, arguments: Mapping[str, Any]) -> asyncio.Lock | None:
    """The lock that keeps calls on one serial resource from overlapping (per event loop;
    see :mod:`tether.serial_keys`)."""
    if not tool.serial:
        return None
    resource = serial_resource(tool.serial, id(tool), arguments)
    key: tuple[Any, ...] = (id(asyncio.get_running_loop()), *resource)
    lock = _serial_locks.get(key)
    if lock is None:
        lock = _serial_locks[key] = asyncio.Lock()
    return lock


class Invoker:
    """Runs calls against a fixed set of tools under fixed limits (one per run drive)."""

    __slots__ = ("_emit", "_limits", "_policy", "_progress", "_semaphore", "_tools", "current")

    def __init__(
        self,
        tools: Mapping[str, Tool],
        limits: Limits,
        emit: Listener | None = None,
        policy: CallPolicy | None = None,
    ) -> None:
        self._tools = tools
        self._limits = limits
        self._emit = emit
        self._policy = policy
        self._semaphore: asyncio.Semaphore | None = None
        self._progress: dict[str, _Progress] = {}
        self.current = TurnOutcome([], [])
        """The turn in progress (what was decided so far, if it is interrupted)."""

    async def run_turn(
        self,
        calls: Sequence[ToolCall],
        make_ctx: Callable[[ToolCall], RunContext[Any]],
        turn: int,
        decisions: Mapping[str, Decision] | None = None,
        waiting: Mapping[str, PendingApproval] | None = None,
    ) -> TurnOutcome:
        """Rule on ``calls``, run the allowed ones, and return one entry per call.

        On resume, ``waiting`` holds the calls still awaiting a human and ``decisions``
        the answers: a call with a decision is not ruled on again.
        """
        progress = self._progress = {}
        out = self.current = TurnOutcome([None] * len(calls), [])
        runnable: list[tuple[int, ToolCall, Tool | None, RunContext[Any]]] = []
        tools = self._tools
        held: set[Resource] = set()  # serial resources with a call waiting for a human

        def run_or_hold(i: int, call: ToolCall, tool: Tool, ctx: RunContext[Any]) -> None:
            resource = _resource(tool, call)
            if resource is not None and resource in held:
                out.pending.append(self._pending(call, tool, ctx, HELD))
            else:
                runnable.append((i, call, tool, ctx))

        def wait(pending: PendingApproval, tool: Tool, call: ToolCall) -> None:
            out.pending.append(pending)
            resource = _resource(tool, call)
            if resource is not None:
                held.add(resource)

        for i, call in enumerate(calls):
            ctx = make_ctx(call)
            progress[call.id] = _Progress(ctx)
            tool = tools.get(call.name)
            decision = decisions.get(call.id) if decisions else None
            if tool is None or call.raw_arguments is not None:
                runnable.append((i, call, tool, ctx))  # answered with an error result
            elif decision is not None:
                out.decisions[call.id] = decision
                if decision.approved:
                    run_or_hold(i, call, tool, ctx)
                else:
                    self._settle(out, i, call, denied_result(call.id, decision.reason), turn)
            elif waiting is not None and call.id in waiting and not _held(waiting[call.id]):
                wait(waiting[call.id], tool, call)
            else:
                if self._policy is None and type(tool).ruling is Tool.ruling:
                    ruling = self._approval_only(tool, call, ctx)  # the common case
                else:
                    ruling = await self._rule(tool, call, ctx)
                if ruling is not ALLOW and not ruling.plain:
                    out.rulings[call.id] = ruling
                    if self._emit:
                        self._emit(CallRuled(turn, call, ruling))
                if ruling.action == "deny":
                    self._settle(out, i, call, blocked_result(call.id, ruling), turn)
                elif ruling.action == "ask":
                    wait(self._pending(call, tool, ctx, ruling), tool, call)
                else:
                    run_or_hold(i, call, tool, ctx)
        if len(runnable) == 1:
            i, call, tool, ctx = runnable[0]
            out.results[i] = await self._one(call, tool, ctx, turn)
        elif runnable:
            done = await asyncio.gather(*self._chains(runnable, turn))
            for chain in done:
                for i, result in chain:
                    out.results[i] = result
        return out

    def close_open(self, calls: Sequence[ToolCall], why: str) -> list[ToolResult]:
        """Results for ``calls`` after the run stopped mid-turn (``why``): the real result of
        each call that finished, and a truthful notice for the others."""
        results = []
        for call in calls:
            p = self._progress.get(call.id)
            if p is not None and p.result is not None:
                results.append(p.result)
            elif p is not None and p.started:
                status: ResultStatus = "abandoned" if p.ctx.in_thread else "interrupted"
                text = ABANDONED if status == "abandoned" else INTERRUPTED
                results.append(ToolResult(call.id, text.format(why=why), status=status))
            else:
                results.append(
                    ToolResult(call.id, NOT_RUN_STOPPED.format(why=why), status="not_run")
                )
        return results

    # --- ruling -------------------------------------------------------------------------

    async def _rule(self, tool: Tool, call: ToolCall, ctx: RunContext[Any]) -> Ruling:
        """The strictest of the tool's and the policy's rulings; failing closed."""
        try:
            ruling = await tool.ruling(call.arguments, ctx)
            if self._policy is not None:
                ruling = strictest(ruling, await self._policy.rule(tool, call, ctx))
        except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:
            return Ruling("deny", f"the policy could not decide ({type(exc).__name__})", "error")
        return ruling

    @staticmethod
    def _approval_only(tool: Tool, call: ToolCall, ctx: RunContext[Any]) -> Ruling:
        """:meth:`Tool.ruling` of a tool that does not override it, without awaiting."""
        try:
            return ASK if tool.needs_approval(call.arguments, ctx) else ALLOW
        except Exception as exc:
            return Ruling("deny", f"the policy could not decide ({type(exc).__name__})", "error")

    def _pending(
        self, call: ToolCall, tool: Tool, ctx: RunContext[Any], ruling: Ruling
    ) -> PendingApproval:
        try:
            context = tool.approval_context(call.arguments, ctx)
        except Exception as exc:  # the approver must still see the call
            context = {"error": f"approval context unavailable: {type(exc).__name__}"}
        return PendingApproval(
            call.id,
            call.name,
            dict(call.arguments),
            arguments_hash(call.arguments),
            context,
            ctx.run_id,
            ruling.to_dict(),
        )

    def _settle(
        self, out: TurnOutcome, i: int, call: ToolCall, result: ToolResult, turn: int
    ) -> None:
        out.results[i] = result
        self._progress[call.id].result = result
        if self._emit:
            self._emit(ToolCallFinished(turn, call, result, 0.0))

    # --- running ------------------------------------------------------------------------

    def _chains(
        self, runnable: list[tuple[int, ToolCall, Tool | None, RunContext[Any]]], turn: int
    ) -> list[Any]:
        """One coroutine per independent call, one per group of calls that must not
        overlap (same serial tool and key), each group in the model's order."""
        groups: dict[tuple[Any, ...], list[tuple[int, ToolCall, Tool | None, RunContext[Any]]]]
        groups = {}
        for item in runnable:
            resource = _resource(item[2], item[1])
            key: tuple[Any, ...] = ("call", item[0]) if resource is None else resource
            groups.setdefault(key, []).append(item)
        return [self._chain(group, turn) for group in groups.values()]

    async def _chain(
        self, group: list[tuple[int, ToolCall, Tool | None, RunContext[Any]]], turn: int
    ) -> list[tuple[int, ToolResult]]:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self._limits.max_concurrency)
        out = []
        for i, call, tool, ctx in group:
            async with self._semaphore:
                out.append((i, await self._one(call, tool, ctx, turn)))
        return out

    async def _one(
        self, call: ToolCall, tool: Tool | None, ctx: RunContext[Any], turn: int
    ) -> ToolResult:
        lock = _serial_lock(tool, call.arguments) if tool is not None and tool.serial else None
        if lock is not None:
            await lock.acquire()
        try:
            emit = self._emit
            started = time.perf_counter() if emit else 0.0
            if emit:
                emit(ToolCallStarted(turn, call))
            progress = self._progress[call.id]
            progress.started = True
            result = await self._execute(call, tool, ctx)
            progress.result = result
        finally:
            if lock is not None:
                lock.release()
        if tool is not None and self._policy is not None and result.status in ("ok", "error"):
            self._policy.record(tool, call, result, ctx)
        if emit:
            emit(ToolCallFinished(turn, call, result, time.perf_counter() - started))
        return result

    async def _execute(
        self,
        call: ToolCall,
        tool: Tool | None,
        ctx: RunContext[Any],
    ) -> ToolResult:
        if tool is None:
            names = ", ".join(sorted(self._tools)) or "none"
            return ToolResult(
                call.id,
                f"Unknown tool {call.name!r}. Available tools: {names}.",
                is_error=True,
            )
        if call.malformed:
            return ToolResult(
                call.id,
                f"The arguments of this call to {call.name!r} are not a valid JSON object "
                "(or nest too deeply). Call again with a JSON object matching the tool's schema.",
                is_error=True,
            )
        limits = self._limits
        scope = None
        try:
            if limits.tool_timeout_seconds is None:
                text = await tool.invoke(call.arguments, ctx)
            else:
                async with (scope := asyncio.timeout(limits.tool_timeout_seconds)):
                    text = await tool.invoke(call.arguments, ctx)
        except ToolFailure as exc:
            return ToolResult(call.id, cap_text(str(exc), limits.max_result_chars), True)
        except TimeoutError as exc:
            if scope is None or not scope.expired():  # the tool's own timeout: a failure
                return self._failure(call, exc, ctx)
            still = (
                "it is still running in its worker thread and may still take effect"
                if ctx.in_thread
                else "it was stopped and may or may not have taken effect"
            )
            return ToolResult(
                call.id,
                f"Tool {call.name!r} did not finish within {limits.tool_timeout_seconds} "
                f"seconds; {still}.",
                is_error=True,
            )
        except Exception as exc:
            return self._failure(call, exc, ctx)
        return ToolResult(call.id, cap_text(text, limits.max_result_chars, CUT_HINT))

    def _failure(self, call: ToolCall, exc: Exception, ctx: RunContext[Any]) -> ToolResult:
        log.error(
            "tool %r raised %s (run %s, turn %d, call %s)",
            call.name,
            type(exc).__name__,
            ctx.run_id,
            ctx.turn,
            call.id,
            exc_info=exc,
        )
        detail = f": {type(exc).__name__}: {exc}" if self._limits.detailed_errors else "."
        return ToolResult(call.id, f"Tool {call.name!r} failed{detail}", is_error=True)


def _held(pending: PendingApproval) -> bool:
    """Whether a pending call waits only for an earlier call on its serial key."""
    return (pending.ruling or {}).get("rule") == HELD.rule
