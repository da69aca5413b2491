"""The desk's ticket pipeline as DBOS workflows: a worker killed anywhere loses nothing.

``tether_desk.ticket`` (one per ticket, taken from the queue by a worker) runs the plain
pipeline's pieces (:mod:`tether_desk.pipeline`) in one step, ``desk.triage``: the claim,
the triage model call and its record, then what the category decides: the answer
(tracking), a person (other), or the refund agent's turns up to its first proposal,
screened by the desk. Nothing in it is irreversible (the agent reads the ticket and the
order; the refund waits for a person), and each write in it is idempotent when the step
runs again after a crash: the claim finds the ticket its own (or, once the ending is
written, no longer ``triaging``: nothing more is done), the trace's inserts skip what an
earlier execution wrote (:class:`~tether_desk.durable.recorder.ReplayableRecorder`), the
answer finds its draft. Once logged, the step returns its result without running (no
model is asked again). Until then the ticket is ``triaging``: a run cut there shows so.

A refund that needs a person holds no workflow while it waits (a night, maybe): the
same step stores, in one transaction, what the plain pipeline stores
(:func:`tether_desk.pipeline.store_approval`): the run's state, the approval row, the
ticket awaiting it and the trace; then the ticket's workflow ends. Run again after a crash
once that is stored, the step's claim finds the ticket moved on and does nothing more.
The web console claims the decision in the approval row and queues
``tether_desk.finish`` under an id derived from the run and the call (:func:`finish_id`;
:meth:`DurableDesk.deliver`), even while no worker runs. That workflow's one step,
``desk.finish``, reads the decision from the row (never from a message), the run's state
and the trace's place (kept in the approval's context), resumes the agent (the refund
runs under its call's idempotency key, so a step run again after a crash finds its refund
in the ledger instead of paying twice) and writes the draft with the run's outcome (or
stores the next proposal, unless an execution cut before its log entry stored it).

A refund ticket is so 2 logged operations: ``desk.triage`` in the ticket's workflow,
``desk.finish`` in the decision's (see docs/durable.md, "The desk's steps"). A step
logged by the previous layout, which returned the call to put to staff, is followed by
``desk.approval``; ``tether_desk.approval`` (a wait in ``DBOS.recv``) stays registered
for the runs of the layout before.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Any, TypeVar

from dbos import DBOS
from dbos._error import DBOSException
from sqlalchemy import bindparam, select, update

from tether.durable import await_decisions
from tether.errors import ConfigError, StateError
from tether.loop import Agent
from tether.outcomes import Decision, PendingApproval, RunResult, RunState
from tether_desk.agent import REFUND_PROMPT, AgentDeps, TicketScope, refund_agent
from tether_desk.approvals import approval_of_call
from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.decisions import DENIED
from tether_desk.durable.boundaries import Boundary, BoundaryClient, BoundaryTool
from tether_desk.durable.recorder import ReplayableRecorder
from tether_desk.models import Approval, RunEvent, Ticket
from tether_desk.operations.transient import is_transient, retry_transient
from tether_desk.orders import OrderView
from tether_desk.pipeline import (
    MAX_SETTLE_ROUNDS,
    Desk,
    _answer_tracking,
    _finish_run,
    _screen_pending,
    category_statement,
    load_scope,
    note_triage,
    note_triage_request,
    record_triage,
    scope_in,
    set_status,
    store_approval,
    ticket_status,
    triage_outcome,
)
from tether_desk.thread import RoundScope, follow_up
from tether_desk.trace import MARK_RESUMED, Written
from tether_desk.triage import classify

log = logging.getLogger("tether_desk")
T = TypeVar("T")
Done = dict[str, Any]
"""A step's logged result: ``{"outcome": STATUS}``, ``{"waiting": {...}}`` (a call to
hand to a waiting workflow) or ``{"status": STATUS}`` (a ticket that was not new); the
triage's also has ``"round"``: what the round read (``[seen, round]``, its follow-up)."""


@dataclass(frozen=True, slots=True)
class _Round:
    """What a round read of its ticket (:class:`~tether_desk.thread.RoundScope`)."""

    ticket_id: int
    seen: int | None
    round: int


TICKET_WORKFLOW = "tether_desk.ticket"
APPROVAL_WORKFLOW = "tether_desk.approval"
"""The previous layout's wait for a decision (``DBOS.recv``): kept for runs logged before."""
FINISH_WORKFLOW = "tether_desk.finish"
_CLAIM = (
    update(Ticket)
    .where(Ticket.id == bindparam("ticket_id_"), Ticket.status.in_(("new", "triaging")))
    .values(status="triaging")
)
_DECIDED_BY = select(Approval.decided_by).where(
    Approval.run_id == bindparam("run_id_"), Approval.call_id == bindparam("call_id_")
)
_APPROVAL = select(
    Approval.id,
    Approval.status,
    Approval.reason,
    Approval.decided_by,
    Approval.arguments_hash,
    Approval.state_version,
    Approval.context,
).where(Approval.run_id == bindparam("run_id_"), Approval.call_id == bindparam("call_id_"))
_REQUESTED = (
    select(RunEvent.seq, RunEvent.data)
    .where(RunEvent.run_id == bindparam("run_id_"), RunEvent.kind == "approval_requested")
    .order_by(RunEvent.seq)
)
EXPIRED = "the approval expired"
TRACE_SEQ = "trace_seq"
"""The key, in an approval's context, of the number of the trace's event that notes it."""


def workflow_id(ticket_id: int, round_: int = 0) -> str:
    """The ticket's workflow id: one workflow per ticket and round (a customer's reply that
    sends the ticket through the pipeline again starts the next round), whoever enqueues it."""
    return f"desk-ticket-{ticket_id}" if not round_ else f"desk-ticket-{ticket_id}.{round_}"


def wait_id(run_id: str, call_id: str) -> str:
    """The id of the workflow that waits for the decision on ``call_id`` of ``run_id``
    (the approval row holds both, so the web console finds it)."""
    return f"desk-wait:{run_id}:{call_id}"


def finish_id(run_id: str, call_id: str) -> str:
    """The id of the workflow that applies the decision on ``call_id`` of ``run_id``: a
    decision delivered twice (a retry, a second console) starts it once."""
    return f"desk-finish:{run_id}:{call_id}"


def _run_id(kind: str) -> str:
    """A run's id, the same in every execution of the workflow (hex, like the plain
    pipeline's random ones, which the console's URLs expect)."""
    return hashlib.sha256(f"{DBOS.workflow_id}:{kind}".encode()).hexdigest()[:24]


@dataclass(slots=True)
class _Installed:
    desk: Desk
    boundary: Boundary | None


_installed: _Installed | None = None


def install(desk: Desk, boundary: Boundary | None = None) -> None:
    """Make ``desk`` the one this process's workflows run with (before DBOS launches)."""
    global _installed
    _installed = _Installed(desk, boundary)


def _flow() -> Flow:
    if _installed is None:
        raise ConfigError("no desk is installed for durable runs in this process")
    return Flow(_installed.desk, _installed.boundary)


@DBOS.workflow(name=TICKET_WORKFLOW)
async def ticket_workflow(ticket_id: int) -> str:
    """One ticket, from its claim to a draft, an answer, a person or a waiting approval."""
    return await _flow().ticket(ticket_id)


@DBOS.workflow(name=FINISH_WORKFLOW)
async def finish_workflow(ticket_id: int, run_id: str, call_id: str) -> str:
    """A staff decision (or an expiry) on a stored approval: the run goes on to its draft
    (or to its next proposal, stored for staff)."""
    return await _flow().finish(ticket_id, run_id, call_id)


@DBOS.workflow(name=APPROVAL_WORKFLOW)
async def approval_workflow(waiting: dict[str, Any]) -> str:
    """The previous layout: one call waiting for staff in ``DBOS.recv`` (runs logged
    before the decision started a workflow of its own finish there)."""
    return await _flow().approval(waiting)


class Flow:
    """One execution of a workflow: the desk, and the boundary hook of the crash tests."""

    def __init__(self, desk: Desk, boundary: Boundary | None) -> None:
        self.desk = desk
        self.db = desk.db
        self.boundary = boundary
        self.ticket_id = 0
        self.inline = inline_bodies(desk.db)
        """Whether the step bodies run on the workflow's loop (:func:`inline_bodies`)."""

    async def at(self, name: str) -> None:
        """A step boundary (see :mod:`tether_desk.durable.boundaries`)."""
        if self.boundary is not None:
            await self.boundary(name, self.ticket_id)

    async def step(self, name: str, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """``await fn(*args)`` as the step ``desk.NAME``, between the boundaries
        ``NAME.before`` and ``NAME.returned`` (its work done, the step not yet logged)."""

        async def body() -> T:
            await self.desk.pages.give_way()  # pages first (tether_desk.priority)
            await self.at(f"{name}.before")
            out = await fn(*args)
            await self.at(f"{name}.returned")
            return out

        result: T = await DBOS.run_step_async({"name": f"desk.{name}"}, body)
        return result

    async def effect(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` (a blocking body: :meth:`blocking`) as the step ``desk.NAME``."""
        return await self.step(name, self.blocking, fn, *args)

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, a step body that blocks on the database, retried on a transient
        fault: on the workflow's loop where :func:`inline_bodies` says so, else in a
        thread."""
        if self.inline:
            return await retry_transient(partial(_now, fn, *args))
        return await retry_transient(partial(asyncio.to_thread, fn, *args))

    async def record(
        self, name: str, recorder: ReplayableRecorder, fn: Callable[..., T], *args: Any
    ) -> T:
        """``fn(*args)``, which writes ``recorder``'s trace in its transaction, as the step
        ``desk.NAME``; the recorder then carries on after what the step wrote (in this
        execution, or in an earlier one when the step is replayed)."""

        def write() -> dict[str, Any]:
            return {"out": fn(*args), "seq": recorder.seq}

        recorder.hold()
        done = await self.effect(name, write)
        recorder.logged(done["seq"])
        out: T = done["out"]
        return out

    async def follow_up(self, scope: RoundScope) -> None:
        """The ticket's next round if the customer wrote while this one ran
        (:func:`tether_desk.thread.follow_up`). Not a step: it does its work once however
        often it runs (a replay finds the round moved on), and its answer steers nothing."""
        await self.blocking(follow_up, self.db, scope)

    # --- the ticket's workflow ----------------------------------------------------------

    async def ticket(self, ticket_id: int) -> str:
        self.ticket_id = ticket_id
        scope: RoundScope | None = None
        try:
            done = await self.step(
                "triage", self._triaged, ticket_id, _run_id("triage"), _run_id("refund")
            )
            if "status" in done:  # not a new ticket (processed by the plain pipeline)
                status: str = done["status"]
                return status
            if "round" in done:  # what the round read: where its follow-up looks from
                scope = _Round(ticket_id, *done["round"])
            if "category" in done:  # logged by the previous layout: its next step follows
                scope = TicketScope(**done["scope"])
                done = await self._decided_by_triage(done, _run_id("refund"))
        except DBOSException:
            raise
        except Exception as exc:
            if is_transient(exc):  # not the ticket's fault: the run resumes once it clears
                raise
            log.exception("ticket %s failed in the durable pipeline", ticket_id)
            await self.effect("failed", set_status, self.db, ticket_id, "failed")
            done = {"outcome": "failed"}
        outcome = await self._hand_over(done)
        if scope is not None and outcome != "awaiting_approval":
            await self.follow_up(scope)
        await self.at("ticket.done")
        self.desk.changed(ticket_id)
        return outcome

    async def _decided_by_triage(self, triaged: dict[str, Any], refund_run: str) -> Done:
        """The previous layout, for a run that logged its triage alone before an upgrade:
        the category's ending or ``desk.agent`` as steps of their own."""
        scope = TicketScope(**triaged["scope"])
        if triaged["category"] == "tracking":
            await self.effect("answer", _answer_tracking, self.db, scope)
            return {"outcome": "answered"}
        if triaged["category"] == "refund":
            done: Done = await self.step("agent", self._refund, scope, refund_run)
            return done
        await self.effect("needs_human", set_status, self.db, scope.ticket_id, "needs_human")
        return {"outcome": "needs_human"}

    async def _triaged(self, ticket_id: int, triage_run: str, refund_run: str) -> Done:
        """The step ``desk.triage``: the claim, the triage model call and its record (the
        trace and the ticket's category), then what the category decides: the answer
        (tracking), a person (other), or the refund agent's turns up to its first
        proposal, screened by the desk. Nothing in it is irreversible (the refund waits
        for a person). Run again after a crash, the claim finds the ticket its own, the
        records write only what is not there yet, the answer finds its draft; once logged,
        no model is asked again. Until then the ticket is ``triaging``."""
        recorder = ReplayableRecorder(self.db, triage_run, ticket_id, "triage")
        note_triage_request(recorder)  # written by the claim: shown while the model thinks
        scope_data = await self.blocking(_claim, self.desk, ticket_id, recorder)
        if scope_data is None:
            return {"status": await self.blocking(ticket_status, self.db, ticket_id)}
        scope = TicketScope(**scope_data)
        done = await self._decided(scope, recorder, refund_run)
        done["round"] = [scope.seen, scope.round]  # what the round read (its follow-up)
        return done

    async def _decided(
        self, scope: TicketScope, recorder: ReplayableRecorder, refund_run: str
    ) -> Done:
        """Inside ``desk.triage``: the triage (its run's start written by the claim) and
        what its category decides. A refund's triage ends with the refund run's first
        write (its first model call's timed write, or the step's last): one transaction
        less, and the triage's events are written before the next slow model call's."""
        ticket_id = scope.ticket_id
        result = await classify(
            self.desk.triage_client or self.desk.client, scope.subject, scope.body
        )
        note_triage(recorder, result)
        if result.category == "refund":
            ended = recorder.ended(
                self.db.dialect,
                *triage_outcome(result),
                result.usage,
                category_statement(scope, result),
            )
            return await self._refund(scope, refund_run, ended)
        recorder.hold()
        await self.blocking(record_triage, recorder, scope, result)
        self.desk.changed(ticket_id)
        if result.category == "tracking":
            await self.at("answer.before")
            await self.blocking(_answer_tracking, self.db, scope)
            await self.at("answer.returned")
            return {"outcome": "answered"}
        await self.at("needs_human.before")
        await self.blocking(set_status, self.db, ticket_id, "needs_human")
        await self.at("needs_human.returned")
        return {"outcome": "needs_human"}

    async def _refund(
        self, scope: TicketScope, run_id: str, triaged: Written | None = None
    ) -> Done:
        """The refund agent's turns up to its first proposal (reads only: nothing
        irreversible), screened by the desk (inside ``desk.triage``). ``triaged``: the
        triage's end, written with this run's first write (or, should the agent break,
        before the error goes on)."""
        recorder = ReplayableRecorder(self.db, run_id, scope.ticket_id, "refund")
        recorder.start()
        recorder.carry(triaged or [])
        agent = self._agent(scope, recorder)
        try:
            result = await agent.run(REFUND_PROMPT, run_id=run_id)
        except Exception as exc:
            if triaged and not is_transient(exc):  # the ticket fails: its triage shows
                recorder.hold()
                try:
                    await self.blocking(recorder.flush)
                except Exception:
                    log.exception("writing the triage of ticket %s failed", scope.ticket_id)
            raise
        return await self._settle(scope, recorder, agent, result)

    # --- the decision's workflow ---------------------------------------------------------

    async def finish(self, ticket_id: int, run_id: str, call_id: str) -> str:
        self.ticket_id = ticket_id
        await self.at("approval.received")
        done = await self.step("finish", self._finish_decided, ticket_id, run_id, call_id)
        outcome = await self._hand_over(done)
        if "round" in done and outcome != "awaiting_approval":
            await self.follow_up(_Round(ticket_id, *done["round"]))
        await self.at("finish.done")
        self.desk.changed(ticket_id)
        return outcome

    async def _finish_decided(self, ticket_id: int, run_id: str, call_id: str) -> Done:
        """The step ``desk.finish``: the decision read from its approval (claimed once by
        the console), the run's state and its trace's place from what ``desk.approval``
        stored, the agent resumed (the refund paid under its idempotency key), then the
        draft or the next proposal."""
        found = await self.blocking(_decision, self.db, run_id, call_id, ticket_id)
        if found is None:  # not decided: nothing to apply (a start no decision made)
            return {"outcome": await self.blocking(ticket_status, self.db, ticket_id)}
        decision, approver, approval_id, seq, state, scope = found
        recorder = ReplayableRecorder(self.db, run_id, ticket_id, "refund", seq=seq, resumed=True)
        done = await self._apply(scope, recorder, state, decision, approver, approval_id)
        done["round"] = [scope.seen, scope.round]  # what the proposal's round had read
        return done

    # --- the previous layout's approval workflow (runs logged before) -------------------

    async def approval(self, waiting: dict[str, Any]) -> str:
        scope = TicketScope(**waiting["scope"])
        self.ticket_id = scope.ticket_id
        state = RunState.from_json(waiting["state"], keys=self.db.state_keys())
        p = next(p for p in state.pending if p.call_id == waiting["call_id"])
        recorder = ReplayableRecorder(
            self.db, state.run_id, scope.ticket_id, "refund", seq=waiting["seq"]
        )
        await self.at("approval.requested")
        store = partial(store_approval, once=True)
        reason = waiting["reason"]
        approval_id = await self.record(
            "approval", recorder, store, self.desk, scope, recorder, state, p, reason, state.usage
        )
        self.desk.changed(scope.ticket_id)
        if approval_id is None:
            await self.at("finish.done")
            return "failed"
        decisions = await await_decisions(state)
        await self.at("approval.received")
        done = await self.step(
            "finish", self._finish, scope, recorder, state, decisions, p.call_id, approval_id
        )
        outcome = await self._hand_over(done)
        if outcome != "awaiting_approval":
            await self.follow_up(scope)
        await self.at("finish.done")
        self.desk.changed(scope.ticket_id)
        return outcome

    async def _finish(
        self,
        scope: TicketScope,
        recorder: ReplayableRecorder,
        state: RunState,
        decisions: list[Decision],
        call_id: str,
        approval_id: int,
    ) -> Done:
        """The previous layout's ``desk.finish``, with the decision received."""
        approver = await self.blocking(_decided, self.db, state.run_id, call_id)
        decision = next(d for d in decisions if d.call_id == call_id)
        return await self._apply(scope, recorder, state, decision, approver, approval_id)

    async def _apply(
        self,
        scope: TicketScope,
        recorder: ReplayableRecorder,
        state: RunState,
        decision: Decision,
        approver: int | None,
        approval_id: int,
    ) -> Done:
        """Who decided noted, the run resumed with the decision, then settled."""
        recorder.note(
            "decision",
            {
                "approval": approval_id,
                "approved": decision.approved,
                "reason": decision.reason,
                "staff": approver,
            },
        )
        agent = self._agent(scope, recorder)
        assert agent.deps is not None
        deps = replace(agent.deps, approved_by=approver if decision.approved else None)
        result = await agent.resume(state, [decision], deps=deps)
        return await self._settle(scope, recorder, agent, result, once=True)

    # --- shared by both -----------------------------------------------------------------

    def _agent(self, scope: TicketScope, recorder: ReplayableRecorder) -> Agent[AgentDeps]:
        agent = refund_agent(self.desk.client, self.db, scope, [recorder, *self.desk.listeners])
        if self.boundary is not None:
            agent.client = BoundaryClient(agent.client, self.at)
            agent.tools = {n: BoundaryTool(t, self.at) for n, t in agent.tools.items()}
        return agent

    async def _settle(
        self,
        scope: TicketScope,
        recorder: ReplayableRecorder,
        agent: Agent[AgentDeps],
        result: RunResult,
        *,
        once: bool = False,
    ) -> Done:
        """Inside a step: refuse in code what no person should be asked (resuming the run
        with the refusals), then store the approval of the call that needs a person (the
        run's state, the approval row, the ticket awaiting it and the trace, in one
        transaction: :func:`_store`), or write the draft with the run's outcome. ``once``:
        keep an approval an earlier execution of the step stored (the decision's step;
        the ticket's step needs no look, its claim stops a replay before this)."""
        for _ in range(MAX_SETTLE_ROUNDS):
            state = result.state
            if result.outcome.kind != "awaiting_approval" or state is None:
                break
            await self.at("screen.before")
            screened = await self.blocking(_screen_pending, self.db, scope, state.pending)
            chosen, refused, view = screened
            if refused:
                for d in refused:
                    recorder.note("refused_by_desk", {"call_id": d.call_id, "reason": d.reason})
                result = await agent.resume(state, refused)
                continue
            assert chosen is not None
            await self.at("approval.requested")
            recorder.hold()
            reason = result.outcome.reason
            stored = await self.blocking(
                _store, self.desk, scope, recorder, state, chosen, reason, view, once
            )
            await self.at("approval.returned")
            return {"outcome": "awaiting_approval" if stored is not None else "failed"}
        await self.at("draft.before")
        recorder.hold()
        await self.blocking(_finish_run, self.db, scope, recorder, result)
        await self.at("draft.returned")
        completed = result.outcome.completed and result.output.strip()
        return {"outcome": "draft_ready" if completed else "failed"}

    async def _hand_over(self, done: Done) -> str:
        """The ticket's status a step returned; or, for a step logged by the previous
        layout (which returned the call to put to staff), its approval stored as the step
        ``desk.approval`` of this workflow, which then ends: staff's decision starts the
        workflow that finishes the run (:func:`finish_id`)."""
        if "waiting" not in done:
            outcome: str = done["outcome"]
            return outcome
        waiting = done["waiting"]
        scope = TicketScope(**waiting["scope"])
        state = RunState.from_json(waiting["state"], keys=self.db.state_keys())
        p = next(p for p in state.pending if p.call_id == waiting["call_id"])
        recorder = ReplayableRecorder(
            self.db, state.run_id, scope.ticket_id, "refund", seq=waiting["seq"]
        )
        await self.at("approval.requested")
        reason = waiting["reason"]
        stored = await self.effect(
            "approval", _store, self.desk, scope, recorder, state, p, reason, None, True
        )
        self.desk.changed(scope.ticket_id)
        return "awaiting_approval" if stored is not None else "failed"


# --- step bodies (blocking: on the workflow's loop on SQLite, see inline_bodies) ----------


def inline_bodies(db: Database) -> bool:
    """Whether the desk's step bodies run on the workflow's own loop rather than in a
    thread each: on SQLite (its writes are serialised anyway, a body is a fraction of a
    millisecond of local work, and its busy wait for the write lock releases the GIL),
    where the hop to a thread and back cost more CPU than the body; not on PostgreSQL,
    where a body waits on the server's round trips, which a thread lets the loop's other
    tickets use (docs/durable.md, "Step bodies on the loop")."""
    return db.dialect == "sqlite"


async def _now(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, here and now (an awaitable for :func:`retry_transient`)."""
    return fn(*args)


def _claim(desk: Desk, ticket_id: int, triage: ReplayableRecorder) -> dict[str, Any] | None:
    """``new -> triaging`` (or already ``triaging``: this workflow claimed it before it
    died; no other process runs a durable desk's tickets) and, in the same transaction,
    the triage run's row and model request (``triage``: the run shows while the model
    thinks, with no write of its own); the ticket's scope, read in that transaction on
    PostgreSQL (one connection less), once SQLite's write lock is let go."""
    inside = None if desk.db.dialect == "sqlite" else partial(scope_in, ticket_id=ticket_id)
    claim = {"ticket_id_": ticket_id, "updated_at": utcnow()}
    claimed, scope = triage.write_if(_CLAIM, claim, inside)
    if not claimed:
        return None
    return asdict(scope if scope is not None else load_scope(desk.db, ticket_id))


def _store(
    desk: Desk,
    scope: TicketScope,
    recorder: ReplayableRecorder,
    state: RunState,
    p: PendingApproval,
    reason: str,
    view: OrderView | None,
    once: bool,
) -> int | None:
    """:func:`~tether_desk.pipeline.store_approval` with the order as screened (``view``;
    ``None``: read now). The approval's context keeps the number of the trace's event that
    notes it (where the decision's step carries the trace on). ``once``: unless an
    execution of this step cut before its log entry stored it: then all it wrote is there
    (one transaction), and a decision may already have moved the ticket on, so nothing is
    written again."""
    if once:
        with desk.db.read_connection() as c:
            found = approval_of_call(c, state.run_id, p.call_id)
        if found is not None:
            return found
    return store_approval(
        desk,
        scope,
        recorder,
        state,
        p,
        reason,
        state.usage,
        view=view,
        once=once,
        context={TRACE_SEQ: recorder.seq + 1},  # note_approval's event, next in the trace
    )


def _decision(
    db: Database, run_id: str, call_id: str, ticket_id: int
) -> tuple[Decision, int | None, int, int, RunState, TicketScope] | None:
    """The decision on ``call_id`` as its approval row holds it (``None`` while it is
    pending), who took it, the approval's id, the trace's number of the event that
    noted it (the run's trace goes on after it), the run's stored state, and the ticket's
    scope with the newest customer message the proposal's round had read."""
    with db.read_connection() as c:
        a = c.execute(_APPROVAL, {"run_id_": run_id, "call_id_": call_id}).one_or_none()
        if a is None or a.status == "pending":
            return None
        context = a.context if isinstance(a.context, dict) else {}
        seq = context.get(TRACE_SEQ)
        if not isinstance(seq, int):  # stored before the approval kept its event's number
            seq = next(
                int(n)
                for n, data in c.execute(_REQUESTED, {"run_id_": run_id})
                if data.get("approval") == a.id
            )
        state = db.state_store().load_in(c, run_id)
        scope = scope_in(c, ticket_id)
    if state is None or state.version != a.state_version:
        raise StateError(f"the stored state of run {run_id} is gone or newer than its approval")
    approved = a.status == "approved"
    reason = "" if approved else EXPIRED if a.status == "expired" else (a.reason or DENIED)
    decision = Decision(call_id, a.arguments_hash, approved, reason, run_id)
    approver = int(a.decided_by) if a.decided_by is not None else None
    seen = context.get("seen")
    scope = replace(scope, seen=seen if isinstance(seen, int) else None)
    return decision, approver, int(a.id), seq, state, scope


def _decided(db: Database, run_id: str, call_id: str) -> int | None:
    """Who decided (the staff id the refund is recorded with); the run goes on."""
    with db.write_connection() as c:
        staff = c.scalar(_DECIDED_BY, {"run_id_": run_id, "call_id_": call_id})
        c.execute(MARK_RESUMED, {"run_id_": run_id})
    return int(staff) if staff is not None else None
