"""One turn's tool calls: check, run concurrently, turn every failure into a result.

Every call gets exactly one :class:`ToolResult`, in call order: an unknown tool, malformed
or invalid arguments, a raising tool, a timeout and a refused approval all become error
results the model can read. A call needing approval with no decision yet is returned as
pending instead, and the calls beside it still run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.errors import StateError, ToolFailure
from tether.events import Listener, ToolCallFinished, ToolCallStarted
from tether.labels import cap_text as cap_text  # labelled results are cut inside
from tether.limits import Limits
from tether.messages import ToolCall, ToolResult
from tether.outcomes import Decision, PendingApproval, arguments_hash
from tether.tools import RunContext, Tool

REFUSED = "Refused by the user; do not retry this call, propose another way."
NOT_EXECUTED_TRUNCATED = "Not executed: the response was cut off (output token limit)."
NOT_EXECUTED_CANCELLED = "Not executed: the run was cancelled."
CUT_HINT = "ask for less (a filter, a page) to see the rest"


@dataclass(slots=True)
class TurnOutcome:
    """Results ready now (call order kept; ``None`` where pending) and pending approvals."""

    results: list[ToolResult | None]
    pending: list[PendingApproval]

    @property
    def all_failed(self) -> bool:
        """True when every result is an error (no call succeeded)."""
        done = [r for r in self.results if r is not None]
        return bool(done) and not self.pending and all(r.is_error for r in done)


class Invoker:
    """Runs calls against a fixed set of tools under fixed limits."""

    __slots__ = ("_emit", "_limits", "_semaphore", "_tools")

    def __init__(
        self, tools: Mapping[str, Tool], limits: Limits, emit: Listener | None = None
    ) -> None:
        self._tools = tools
        self._limits = limits
        self._emit = emit
        self._semaphore: asyncio.Semaphore | None = None

    async def run_turn(
        self,
        calls: Sequence[ToolCall],
        make_ctx: Callable[[ToolCall], RunContext[Any]],
        turn: int,
        decisions: Mapping[str, Decision] | None = None,
    ) -> TurnOutcome:
        """Run ``calls`` (concurrently, bounded) and return one entry per call."""
        pending: list[PendingApproval] = []
        slots: list[ToolResult | None] = [None] * len(calls)
        runnable: list[tuple[int, ToolCall, Tool | None, RunContext[Any]]] = []
        for i, call in enumerate(calls):
            tool = self._tools.get(call.name)
            ctx = make_ctx(call)
            if tool is not None and not call.malformed and tool.needs_approval(call.arguments, ctx):
                decision = (decisions or {}).get(call.id)
                if decision is None:
                    pending.append(self._pending(call, tool, ctx))
                    continue
                if decision.arguments_hash != arguments_hash(call.arguments):
                    raise StateError(
                        f"the decision for call {call.id} was made for other arguments; "
                        "it cannot be applied to this call"
                    )
                if not decision.approved:
                    reason = f" Reason: {decision.reason}" if decision.reason else ""
                    slots[i] = ToolResult(call.id, REFUSED + reason, is_error=True)
                    continue
            runnable.append((i, call, tool, ctx))
        if len(runnable) == 1:
            i, call, tool, ctx = runnable[0]
            if self._emit is None:  # the common case: one call, nobody listening
                slots[i] = await self._execute(call, tool, ctx)
            else:
                slots[i] = await self._one(call, tool, ctx, turn)
        elif runnable:
            done = await asyncio.gather(
                *(self._bounded(call, tool, ctx, turn) for _, call, tool, ctx in runnable)
            )
            for (i, _, _, _), result in zip(runnable, done, strict=True):
                slots[i] = result
        return TurnOutcome(slots, pending)

    def _pending(self, call: ToolCall, tool: Tool, ctx: RunContext[Any]) -> PendingApproval:
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
        )

    async def _bounded(
        self,
        call: ToolCall,
        tool: Tool | None,
        ctx: RunContext[Any],
        turn: int,
    ) -> ToolResult:
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self._limits.max_concurrency)
        async with self._semaphore:
            return await self._one(call, tool, ctx, turn)

    async def _one(
        self,
        call: ToolCall,
        tool: Tool | None,
        ctx: RunContext[Any],
        turn: int,
    ) -> ToolResult:
        emit = self._emit
        started = time.perf_counter() if emit else 0.0
        if emit:
            emit(ToolCallStarted(turn, call))
        result = await self._execute(call, tool, ctx)
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
                f"The arguments of this call to {call.name!r} are not a valid JSON object. "
                "Call again with a JSON object matching the tool's schema.",
                is_error=True,
            )
        limits = self._limits
        try:
            if limits.tool_timeout_seconds is None:
                text = await tool.invoke(call.arguments, ctx)
            else:
                async with asyncio.timeout(limits.tool_timeout_seconds):
                    text = await tool.invoke(call.arguments, ctx)
        except ToolFailure as exc:
            return ToolResult(call.id, cap_text(str(exc), limits.max_result_chars), True)
        except TimeoutError:
            return ToolResult(
                call.id,
                f"Tool {call.name!r} did not finish within {limits.tool_timeout_seconds} seconds.",
                is_error=True,
            )
        except Exception as exc:
            detail = f": {type(exc).__name__}: {exc}" if limits.detailed_errors else "."
            return ToolResult(call.id, f"Tool {call.name!r} failed{detail}", is_error=True)
        return ToolResult(call.id, cap_text(text, limits.max_result_chars, CUT_HINT))
