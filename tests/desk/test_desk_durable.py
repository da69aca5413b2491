"""The durable desk in one process on SQLite (``tether serve``'s default): the same path
and trace as the plain pipeline, each effect a logged step, decisions from the console's
side (approve, deny, expire) applied once, a forged one ignored, a ticket queued twice
run once."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

import pytest
from dbos import DBOS
from helpers import add_ticket, pending_approval, refunds_by_order, staff_id, until_status
from sqlalchemy import select, update

from tether.clients import BaseChatClient, ChatOptions, ChatResponse
from tether.messages import Message
from tether.outcomes import Decision, RunResult
from tether.tools import ToolSpec
from tether_desk.agent import TicketScope
from tether_desk.db import Database, sqlite_url
from tether_desk.decisions import claim_decision, decide, expire_due, recover_decided, resume
from tether_desk.durable import DurableDesk, finish_id, flow, workflow_id
from tether_desk.durable.flow import Flow
from tether_desk.durable.recorder import ReplayableRecorder
from tether_desk.models import Approval, Order, Refund, Run, RunEvent, Ticket
from tether_desk.pipeline import Desk, process_ticket
from tether_desk.scripted import DeskScriptedModel
from tether_desk.tickets import draft_of


def trace(db: Database, ticket_id: int) -> list[tuple[str, list[str]]]:
    with db.read_connection() as c:
        runs = c.execute(
            select(Run.id, Run.kind).where(Run.ticket_id == ticket_id).order_by(Run.started_at)
        ).all()
        return [
            (
                kind,
                list(
                    c.scalars(
                        select(RunEvent.kind).where(RunEvent.run_id == rid).order_by(RunEvent.seq)
                    )
                ),
            )
            for rid, kind in runs
        ]


async def test_a_refund_takes_the_plain_pipelines_path_as_logged_steps(
    durable: Desk, desk: Desk
) -> None:
    body = "Mon colis est arrive abime, je demande 15 EUR."
    tid = add_ticket(durable.db, body)
    assert durable.runs is not None
    await durable.runs.submit_new()
    assert await until_status(durable.db, tid, "awaiting_approval") == "awaiting_approval"
    approval = pending_approval(durable.db, tid)
    assert approval is not None and approval.amount_cents == 1500
    with durable.db.read_connection() as c:  # where the decision's step goes on in the trace
        requested = c.scalar(
            select(RunEvent.seq).where(
                RunEvent.run_id == approval.run_id, RunEvent.kind == "approval_requested"
            )
        )
    assert requested is not None and approval.context["trace_seq"] == requested
    status = await decide(durable, approval.id, staff_id(durable.db), approve=True)
    assert status == "awaiting_approval"  # the decision started the run's finish
    assert await until_status(durable.db, tid, "draft_ready") == "draft_ready"
    draft = draft_of(durable.db, tid)
    assert draft is not None and "rembourse 15.00 EUR" in draft.body

    # the plain pipeline, on the same ticket in another database, writes the same trace
    # (a turn's two reads run at once as steps: their events may interleave)
    plain = add_ticket(desk.db, body)
    assert await process_ticket(desk, plain) == "awaiting_approval"
    waiting = pending_approval(desk.db, plain)
    assert waiting is not None
    await decide(desk, waiting.id, staff_id(desk.db), approve=True)
    assert [(k, sorted(e)) for k, e in trace(durable.db, tid)] == [
        (k, sorted(e)) for k, e in trace(desk.db, plain)
    ]
    untooled = [
        (k, [e for e in es if not e.startswith("tool_")]) for k, es in trace(desk.db, plain)
    ]
    assert [
        (k, [e for e in es if not e.startswith("tool_")]) for k, es in trace(durable.db, tid)
    ] == untooled

    steps = await DBOS.list_workflow_steps_async(workflow_id(tid))
    assert [s["function_name"] for s in steps] == [
        "desk.triage",  # the claim, the model call and its record, then the agent's turns
        # up to its proposal, screened, and the approval stored for staff, in one step;
        # the ticket's workflow ends: nothing waits
    ]
    finished = await DBOS.list_workflow_steps_async(finish_id(approval.run_id, approval.call_id))
    # the decision started it: the refund (its idempotency key makes it once), the last
    # model call and the draft in one step
    assert [s["function_name"] for s in finished] == ["desk.finish"]


async def test_a_denial_refunds_nothing_and_the_agent_drafts_a_reply(durable: Desk) -> None:
    tid = add_ticket(durable.db, "Article manquant, remboursez-moi 9 EUR svp.")
    assert durable.runs is not None
    await durable.runs.submit_new()
    await until_status(durable.db, tid, "awaiting_approval")
    approval = pending_approval(durable.db, tid)
    assert approval is not None
    await decide(durable, approval.id, staff_id(durable.db), approve=False, reason="photo first")
    await until_status(durable.db, tid, "draft_ready")
    with durable.db.read_connection() as c:
        assert c.scalar(select(Refund.id).where(Refund.ticket_id == tid)) is None
    draft = draft_of(durable.db, tid)
    assert draft is not None and "Un conseiller" in draft.body


async def test_an_approval_past_its_time_is_denied_from_the_console(durable: Desk) -> None:
    durable.approval_ttl = timedelta(seconds=0)
    try:
        tid = add_ticket(durable.db, "Colis casse, je demande 5 EUR.")
        assert durable.runs is not None
        await durable.runs.submit_new()
        await until_status(durable.db, tid, "awaiting_approval")
    finally:
        durable.approval_ttl = timedelta(hours=24)
    assert await expire_due(durable) >= 1  # the console's loop does this once a minute
    await until_status(durable.db, tid, "draft_ready")
    with durable.db.read_connection() as c:
        status = c.scalar(select(Approval.status).where(Approval.ticket_id == tid))
        assert c.scalar(select(Refund.id).where(Refund.ticket_id == tid)) is None
    assert status == "expired"


async def test_queued_twice_decided_twice_forged_once_refunds_once(durable: Desk) -> None:
    runs = durable.runs
    assert isinstance(runs, DurableDesk)
    tid = add_ticket(durable.db, "Colis abime, remboursez 7 EUR.")
    await asyncio.gather(runs.submit(tid), runs.submit(tid), runs.submit_new())
    await until_status(durable.db, tid, "awaiting_approval")
    approval = pending_approval(durable.db, tid)
    assert approval is not None
    # a forged decision (other arguments) on a pending approval starts nothing
    await runs.deliver(Decision(approval.call_id, "0" * 64, True, "", approval.run_id))
    await asyncio.sleep(0.5)
    assert refunds_by_order(durable.db).get(order_of(durable.db, tid)) is None
    claimed = claim_decision(durable, approval.id, staff_id(durable.db), approve=True)
    await resume(durable, claimed)
    await resume(durable, claimed, replay=True)  # sent again: applied once
    await until_status(durable.db, tid, "draft_ready")
    assert await recover_decided(durable) == 0  # nothing left to send
    with durable.db.read_connection() as c:
        refunds = c.scalars(select(Refund.amount_cents).where(Refund.ticket_id == tid)).all()
        run_ids = c.scalars(select(Run.id).where(Run.ticket_id == tid)).all()
        decisions = c.scalars(
            select(RunEvent.id).where(RunEvent.run_id.in_(run_ids), RunEvent.kind == "decision")
        ).all()
    assert refunds == [700] and len(run_ids) == 2 and len(decisions) == 1
    workflows = await DBOS.list_workflows_async(workflow_ids=[workflow_id(tid)])
    assert [w.status for w in workflows] == ["SUCCESS"]


def order_of(db: Database, ticket_id: int) -> str:
    with db.read_connection() as c:
        return str(
            c.scalar(
                select(Order.number)
                .join(Ticket, Ticket.order_id == Order.id)
                .where(Ticket.id == ticket_id)
            )
        )


def test_the_durable_log_sits_beside_the_desks_database(tmp_path: Path) -> None:
    from tether.errors import ConfigError
    from tether_desk.durable import system_database_url

    assert system_database_url(sqlite_url(tmp_path / "desk.db")) == (
        f"sqlite:///{tmp_path / 'desk.runs.db'}"
    )
    pg = "postgresql+psycopg://desk:secret@db:5432/desk"
    assert system_database_url(pg) == "postgresql://desk:secret@db:5432/desk"
    with pytest.raises(ConfigError, match="memory"):
        system_database_url("sqlite+pysqlite:///:memory:")


class _BrokenTriage(BaseChatClient):
    """A triage model whose client breaks with an error no provider adapter translates."""

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        raise RuntimeError("the triage client broke")


async def test_a_triage_that_breaks_hands_the_ticket_to_a_person(durable: Desk) -> None:
    durable.triage_client = _BrokenTriage()
    try:
        tid = add_ticket(durable.db, "Colis abime, remboursez-moi 3 EUR.")
        assert durable.runs is not None
        await durable.runs.submit_new()
        assert await until_status(durable.db, tid, "failed", "needs_human") == "failed"
    finally:
        durable.triage_client = None
    handle = await DBOS.retrieve_workflow_async(workflow_id(tid))
    assert await handle.get_result() == "failed"  # its status is written before it ends
    workflows = await DBOS.list_workflows_async(workflow_ids=[workflow_id(tid)])
    assert [w.status for w in workflows] == ["SUCCESS"]  # the workflow ended, not errored


async def test_a_ticket_logged_by_the_previous_layout_stores_its_approval_in_its_own_step(
    durable: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ticket's step logged before the approval moved into it returned the call to put
    to staff: the workflow stores it as ``desk.approval``, and its finish, with no trace
    number in the approval's context, finds its place in the trace."""

    async def previous(
        flow: Flow,
        scope: TicketScope,
        recorder: ReplayableRecorder,
        agent: object,
        result: RunResult,
        *,
        once: bool = False,
    ) -> dict:
        state = result.state
        assert state is not None and result.outcome.kind == "awaiting_approval"
        recorder.hold()
        await asyncio.to_thread(recorder.flush)
        waiting = {
            "scope": asdict(scope),
            "state": state.to_json(),
            "run_id": state.run_id,
            "call_id": state.pending[0].call_id,
            "seq": recorder.seq,
            "reason": result.outcome.reason,
        }
        return {"waiting": waiting}  # fmt: skip

    body = "Colis abime, je demande 6 EUR."
    assert durable.runs is not None
    with monkeypatch.context() as patched:
        patched.setattr(Flow, "_settle", previous)
        old = add_ticket(durable.db, body)
        await durable.runs.submit_new()
        await until_status(durable.db, old, "awaiting_approval")
    steps = await DBOS.list_workflow_steps_async(workflow_id(old))
    assert [s["function_name"] for s in steps] == ["desk.triage", "desk.approval"]
    approval = pending_approval(durable.db, old)
    assert approval is not None
    with durable.db.write_connection() as c:  # as the previous code stored it
        context = {k: v for k, v in approval.context.items() if k != "trace_seq"}
        c.execute(update(Approval).where(Approval.id == approval.id).values(context=context))
    await decide(durable, approval.id, staff_id(durable.db), approve=True)
    assert await until_status(durable.db, old, "draft_ready") == "draft_ready"

    new = add_ticket(durable.db, body)
    await durable.runs.submit_new()
    await until_status(durable.db, new, "awaiting_approval")
    waiting = pending_approval(durable.db, new)
    assert waiting is not None
    await decide(durable, waiting.id, staff_id(durable.db), approve=True)
    assert await until_status(durable.db, new, "draft_ready") == "draft_ready"
    assert [(k, sorted(e)) for k, e in trace(durable.db, old)] == [
        (k, sorted(e)) for k, e in trace(durable.db, new)
    ]


BODIES = ("_claim", "_screen_pending", "_store", "_decision", "_finish_run")
"""A refund's triage is recorded by the refund run's first write: no body of its own."""


async def test_on_sqlite_the_step_bodies_run_on_the_workflows_loop(
    durable: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No step body of a refund ticket (claim, screening, approval stored,
    decision read, draft) nor its follow-up hops to a thread: each runs on the thread of
    the loop that runs its workflow (the thread its step boundaries are passed on)."""
    bodies: list[tuple[str, int]] = []
    loops: set[int] = set()

    def on_thread(name: str, fn: Callable[..., object]) -> Callable[..., object]:
        def body(*args: object) -> object:
            bodies.append((name, threading.get_ident()))
            return fn(*args)

        return body

    for name in (*BODIES, "follow_up"):
        monkeypatch.setattr(flow, name, on_thread(name, getattr(flow, name)))
    at = Flow.at

    async def boundary(self: Flow, name: str) -> None:
        loops.add(threading.get_ident())
        await at(self, name)

    monkeypatch.setattr(Flow, "at", boundary)
    tid = add_ticket(durable.db, "Colis abime, je demande 4 EUR.")
    assert durable.runs is not None
    await durable.runs.submit_new()
    await until_status(durable.db, tid, "awaiting_approval")
    approval = pending_approval(durable.db, tid)
    assert approval is not None
    await decide(durable, approval.id, staff_id(durable.db), approve=True)
    await until_status(durable.db, tid, "draft_ready")
    assert sorted({n for n, _ in bodies}) == sorted((*BODIES, "follow_up"))
    assert loops and {ident for _, ident in bodies} <= loops
    assert threading.get_ident() not in loops  # DBOS's loop, not this test's


def test_a_step_body_hops_to_a_thread_on_postgresql_and_runs_inline_on_sqlite(
    desk: Desk,
) -> None:
    """On PostgreSQL a body waits on the server's round trips: it gets a thread of its
    own (``create_engine`` connects to nothing here)."""
    pg = Desk(Database("postgresql+psycopg://desk@127.0.0.1:1/desk"), DeskScriptedModel())

    async def where(d: Desk) -> bool:
        return await Flow(d, None).blocking(threading.get_ident) == threading.get_ident()

    assert asyncio.run(where(desk)) is True
    assert asyncio.run(where(pg)) is False
    pg.db.dispose()


def test_an_inline_step_body_is_retried_on_a_transient_fault(
    desk: Desk, caplog: pytest.LogCaptureFixture
) -> None:
    tries: list[int] = []

    def locked_once(ticket_id: int) -> int:
        tries.append(threading.get_ident())
        if len(tries) == 1:
            raise sqlite3.OperationalError("database is locked")
        return ticket_id

    async def run() -> int:
        return await Flow(desk, None).blocking(locked_once, 7)

    assert asyncio.run(run()) == 7
    assert tries == [threading.get_ident()] * 2  # both tries inline, on this loop
    assert "transient database error" in caplog.text

    def broken(ticket_id: int) -> int:
        raise ValueError(f"ticket {ticket_id} is broken")

    with pytest.raises(ValueError, match="broken"):
        asyncio.run(Flow(desk, None).blocking(broken, 8))
