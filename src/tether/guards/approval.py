"""Human approval of irreversible calls, written in code, in two modes over one declaration.

Declare that a tool needs approval with ``@tool(requires_approval=True)`` or with
:func:`requires_approval`, which also lets the application add what the approver must see
and the call alone does not say (the raw ticket, the amount, what was already refunded).

* **Deferred** (the default): the loop does not run the call; the run ends as
  ``awaiting_approval`` with a JSON :class:`~tether.outcomes.RunState` that any process can
  resume with ``pending.approve()`` / ``pending.deny(reason)``. Each decision is bound to
  its run, its call id and the hash of its arguments. :func:`decide` and
  :func:`run_with_approvals` drive that round trip with an approver function.
* **Inline**: :class:`InlineApproval` awaits an approver inside the call. No answer within
  ``timeout``, an approver that raises, or any answer other than ``True`` /
  ``Verdict(True)`` is a refusal: an unanswered approval never runs the tool.

The same approver (any callable, sync or async, taking an :class:`ApprovalRequest`) serves
both modes: a CLI prompt, a web form, a test function.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from tether.errors import ToolFailure
from tether.invoke import REFUSED
from tether.messages import ToolResult
from tether.outcomes import Decision, PendingApproval
from tether.rulings import ALLOW, Ruling
from tether.tools import DelegatingTool, RunContext, Tool

if TYPE_CHECKING:
    from tether.loop import Agent
    from tether.outcomes import RunResult, RunState

__all__ = [
    "ApprovalRequest",
    "ApprovalRequired",
    "Approver",
    "InlineApproval",
    "TurnApprovalRequest",
    "TurnApprover",
    "Verdict",
    "ask",
    "console_approver",
    "decide",
    "decide_turn",
    "refusal",
    "requires_approval",
    "run_with_approvals",
]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """What an approver is shown: the call, and the context the application added."""

    tool: str
    arguments: Mapping[str, Any]
    context: Any = None
    call_id: str = ""
    run_id: str = ""
    ruling: Mapping[str, Any] | None = None
    """Why the call waits: the rule that asked, its reason and details."""

    @classmethod
    def from_pending(cls, pending: PendingApproval) -> ApprovalRequest:
        """The request for a call waiting in a run state (deferred mode)."""
        return cls(
            pending.tool,
            pending.arguments,
            pending.context,
            pending.call_id,
            pending.run_id,
            pending.ruling,
        )


@dataclass(frozen=True, slots=True)
class TurnApprovalRequest:
    """Every call of one turn that waits for a human, shown together, with the results of
    the calls of that turn that already ran (so the approver sees the whole turn)."""

    run_id: str
    requests: tuple[ApprovalRequest, ...]
    ran: tuple[tuple[str, Mapping[str, Any], ToolResult], ...] = ()
    """``(tool, arguments, result)`` of each call of the turn that already ran."""

    @classmethod
    def from_state(cls, state: RunState) -> TurnApprovalRequest:
        """The request for the open turn of a run state."""
        calls = {c.id: c for c in state.transcript[-1].tool_calls} if state.transcript else {}
        ran = tuple(
            (calls[r.call_id].name, calls[r.call_id].arguments, r)
            for r in state.ready_results
            if r.call_id in calls
        )
        requests = tuple(ApprovalRequest.from_pending(p) for p in state.pending)
        return cls(state.run_id, requests, ran)


@dataclass(frozen=True, slots=True)
class Verdict:
    """An approver's answer with an optional reason (shown to the model on refusal)."""

    approved: bool
    reason: str = ""


ApproverAnswer: TypeAlias = bool | Verdict
Approver: TypeAlias = Callable[[ApprovalRequest], ApproverAnswer | Awaitable[ApproverAnswer]]
TurnAnswer: TypeAlias = Mapping[str, ApproverAnswer] | Sequence[ApproverAnswer]
TurnApprover: TypeAlias = Callable[[TurnApprovalRequest], TurnAnswer | Awaitable[TurnAnswer]]
"""Decides a whole turn: one answer per request, by call id or in the requests' order."""
ContextFunction: TypeAlias = Callable[[Mapping[str, Any], RunContext[Any]], Any]


def refusal(reason: str = "") -> str:
    """The text the model reads for a refused call (the same in both modes)."""
    return f"{REFUSED} Reason: {reason}" if reason else REFUSED


async def ask(approver: Approver, request: ApprovalRequest, seconds: float | None) -> Verdict:
    """Ask ``approver`` and fail closed: a timeout, an exception or an answer that is not
    ``True`` or a :class:`Verdict` is a refusal. ``seconds`` bounds the wait."""
    try:
        async with asyncio.timeout(seconds):
            answer = approver(request)
            if inspect.isawaitable(answer):
                answer = await answer
    except TimeoutError:
        return Verdict(False, f"no answer within {seconds:g} seconds")
    except Exception as exc:
        return Verdict(False, f"the approval could not be obtained ({type(exc).__name__})")
    return _verdict(answer, "the approver gave no recognisable answer")


class ApprovalRequired(DelegatingTool):
    """A tool that needs a human's approval, with optional extra context for the approver.

    The model sees the same name, description and schema; only the execution changes.
    """

    def __init__(self, inner: Tool, context: ContextFunction | None = None) -> None:
        super().__init__(inner)
        self.requires_approval = True
        self._context = context

    def approval_context(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> Any:
        base = self.inner.approval_context(arguments, ctx)
        if self._context is None:
            return base
        extra = self._context(arguments, ctx)
        if base is None:
            return extra
        if isinstance(base, Mapping) and isinstance(extra, Mapping):
            return {**base, **extra}
        return {"tool": base, "application": extra}


def requires_approval(tool: Tool, *, context: ContextFunction | None = None) -> ApprovalRequired:
    """Mark ``tool`` as needing approval; ``context(arguments, ctx)`` returns what the
    approver must see beyond the call (JSON-ready: it travels in the run state)."""
    return ApprovalRequired(tool, context)


class InlineApproval(DelegatingTool):
    """Awaits ``approver`` inside the call; the tool runs only on an explicit approval.

    The wrapper clears ``requires_approval`` so the loop does not defer the call: the wait
    happens here. ``timeout`` (seconds, ``None`` for none) counts as a refusal. A run's
    ``Limits.tool_timeout_seconds`` also bounds the wait, since it bounds the whole call.
    """

    def __init__(
        self,
        inner: Tool,
        approver: Approver,
        *,
        timeout: float | None = 300.0,
        context: ContextFunction | None = None,
    ) -> None:
        super().__init__(ApprovalRequired(inner, context) if context else inner)
        self.requires_approval = False
        self.approver = approver
        self.timeout = timeout

    def needs_approval(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> bool:
        """Never deferred: the approver is asked inside the call."""
        return False

    async def ruling(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> Ruling:
        """The inner tool's ruling, except that ``ask`` is answered here, inside the call;
        a deny-rule still refuses the call before the approver is asked."""
        inner = await self.inner.ruling(arguments, ctx)
        return inner if inner.action == "deny" else ALLOW

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        try:
            context = self.inner.approval_context(arguments, ctx)
        except Exception as exc:  # the approver must still see the call
            context = {"error": f"approval context unavailable: {type(exc).__name__}"}
        call_id = ctx.call.id if ctx.call is not None else ""
        request = ApprovalRequest(self.name, dict(arguments), context, call_id, ctx.run_id)
        verdict = await ask(self.approver, request, self.timeout)
        if not verdict.approved:
            raise ToolFailure(refusal(verdict.reason))
        return await self.inner.invoke(arguments, ctx)


async def decide(
    pending: Iterable[PendingApproval],
    approver: Approver,
    *,
    approval_timeout: float | None = None,
) -> list[Decision]:
    """Deferred mode: one decision per pending call, asked one at a time, failing closed."""
    decisions = []
    for p in pending:
        verdict = await ask(approver, ApprovalRequest.from_pending(p), approval_timeout)
        decisions.append(p.approve() if verdict.approved else p.deny(verdict.reason))
    return decisions


async def decide_turn(
    state: RunState,
    approver: TurnApprover,
    *,
    approval_timeout: float | None = None,
) -> list[Decision]:
    """Deferred mode, a whole turn at once: ``approver`` sees every pending call of the
    turn together with the results of the calls that already ran, and answers each (by
    call id, or a list in the requests' order). Fails closed: a call left unanswered, an
    unrecognisable answer, a timeout or an exception refuses."""
    request = TurnApprovalRequest.from_state(state)
    try:
        async with asyncio.timeout(approval_timeout):
            answer = approver(request)
            if inspect.isawaitable(answer):
                answer = await answer
        failure = ""
    except TimeoutError:
        answer, failure = {}, f"no answer within {approval_timeout:g} seconds"
    except Exception as exc:
        answer, failure = {}, f"the approval could not be obtained ({type(exc).__name__})"
    if isinstance(answer, Mapping):
        by_call = answer
    elif isinstance(answer, Sequence) and len(answer) == len(state.pending):
        by_call = {p.call_id: a for p, a in zip(state.pending, answer, strict=True)}
    else:
        by_call, failure = {}, failure or "the approver gave no recognisable answer"
    decisions = []
    for p in state.pending:
        verdict = _verdict(by_call.get(p.call_id), failure or "no answer for this call")
        decisions.append(p.approve() if verdict.approved else p.deny(verdict.reason))
    return decisions


def _verdict(answer: Any, missing: str) -> Verdict:
    if isinstance(answer, Verdict):
        return answer
    if answer is True:
        return Verdict(True)
    if answer is False:
        return Verdict(False)
    return Verdict(False, missing)


async def run_with_approvals(
    agent: Agent[Any],
    prompt: str,
    approver: Approver | None = None,
    *,
    turn_approver: TurnApprover | None = None,
    max_rounds: int = 20,
    approval_timeout: float | None = None,
    deps: Any = None,
) -> RunResult:
    """Run ``agent`` and answer each ``awaiting_approval`` with ``approver`` (one call at a
    time) or ``turn_approver`` (a whole turn at once), resuming until the run ends otherwise
    or ``max_rounds`` approval rounds have passed (then the last ``awaiting_approval``
    result is returned as is)."""
    if (approver is None) == (turn_approver is None):
        raise ValueError("give exactly one of approver and turn_approver")
    result = await agent.run(prompt, deps=deps)
    rounds = 0
    while result.outcome.kind == "awaiting_approval" and result.state and rounds < max_rounds:
        if turn_approver is not None:
            decisions = await decide_turn(
                result.state, turn_approver, approval_timeout=approval_timeout
            )
        else:
            assert approver is not None
            decisions = await decide(
                result.state.pending, approver, approval_timeout=approval_timeout
            )
        result = await agent.resume(result.state, decisions, deps=deps)
        rounds += 1
    return result


def console_approver(
    read: Callable[[str], str] = input, write: Callable[[str], Any] = print
) -> Approver:
    """An approver that prints the request and reads ``y``/``n`` on the terminal, in a
    worker thread so the event loop keeps running. Anything but ``y`` or ``yes`` refuses."""

    async def approve(request: ApprovalRequest) -> Verdict:
        write(f"Approve {request.tool}({dict(request.arguments)})?")
        if request.context is not None:
            write(f"  context: {request.context}")
        answer = (await asyncio.to_thread(read, "[y/N] ")).strip().lower()
        return Verdict(answer in {"y", "yes"}, "" if answer else "no answer")

    return approve
