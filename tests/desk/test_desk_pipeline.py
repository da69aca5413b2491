"""The pipeline on the seeded tickets with the desk's scripted model: triage paths,
deferred approval stored in the database, resumed once, refund in the ledger, draft."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from helpers import pending_approval, refunds_by_order, staff_id, ticket, ticket_id_by_order
from sqlalchemy import select

from tether_desk.db import Database
from tether_desk.decisions import claim_decision, decide, expire_due, resume
from tether_desk.errors import Conflict, InvalidInput
from tether_desk.models import Draft, Message, Notification, Run, RunEvent, Staff
from tether_desk.pipeline import Desk, process_ticket
from tether_desk.tickets import draft_of, send_reply


async def test_tracking_is_answered_from_the_order_status(desk: Desk) -> None:
    tid = ticket_id_by_order(desk.db, "C-1187")
    assert await process_ticket(desk, tid) == "answered"
    t = ticket(desk.db, tid)
    assert t.category == "tracking"
    assert t.reply is not None and "C-1187" in t.reply and "en preparation" in t.reply


async def test_other_goes_to_the_human_queue(desk: Desk) -> None:
    tid = ticket_id_by_order(desk.db, "C-3107")
    assert await process_ticket(desk, tid) == "needs_human"
    assert ticket(desk.db, tid).category == "other"
    assert draft_of(desk.db, tid) is None


async def test_a_ticket_is_processed_once(desk: Desk) -> None:
    tid = ticket_id_by_order(desk.db, "C-2210")
    statuses = await asyncio.gather(*(process_ticket(desk, tid) for _ in range(5)))
    assert set(statuses) <= {"awaiting_approval", "triaging"}
    with desk.db.read() as s:
        runs = s.scalars(select(Run.kind).where(Run.ticket_id == tid)).all()
    assert sorted(runs) == ["refund", "triage"]


async def test_refund_waits_for_staff_then_refunds_once_and_drafts(desk: Desk) -> None:
    tid = ticket_id_by_order(desk.db, "C-2210")  # asks for 12 EUR on a 35 EUR order
    assert await process_ticket(desk, tid) == "awaiting_approval"
    approval = pending_approval(desk.db, tid)
    assert approval is not None
    assert approval.amount_cents == 1200 and not approval.typed_amount_required
    assert refunds_by_order(desk.db) == {}
    status = await decide(desk, approval.id, staff_id(desk.db), approve=True)
    assert status == "draft_ready"
    assert refunds_by_order(desk.db) == {"C-2210": 1200}
    draft = draft_of(desk.db, tid)
    assert draft is not None and "12.00 EUR" in draft.body and draft.sent_at is None
    # a second decision on the same approval changes nothing
    with pytest.raises(Conflict, match="already approved"):
        await decide(desk, approval.id, staff_id(desk.db), approve=True)
    assert refunds_by_order(desk.db) == {"C-2210": 1200}
    send_reply(desk.db, tid, staff_id(desk.db))
    assert ticket(desk.db, tid).reply == draft.body


async def test_concurrent_decisions_resume_the_run_once(desk: Desk) -> None:
    tid = ticket_id_by_order(desk.db, "C-2210")
    await process_ticket(desk, tid)
    approval = pending_approval(desk.db, tid)
    assert approval is not None

    async def one() -> str:
        try:
            return await decide(desk, approval.id, staff_id(desk.db), approve=True)
        except Conflict:
            return "conflict"

    outcomes = await asyncio.gather(*(one() for _ in range(10)))
    assert outcomes.count("draft_ready") == 1
    assert outcomes.count("conflict") == 9
    assert refunds_by_order(desk.db) == {"C-2210": 1200}


async def test_resuming_the_same_state_twice_refunds_once(desk: Desk) -> None:
    tid = ticket_id_by_order(desk.db, "C-2210")
    await process_ticket(desk, tid)
    approval = pending_approval(desk.db, tid)
    assert approval is not None
    claimed = claim_decision(desk, approval.id, staff_id(desk.db), approve=True)
    await resume(desk, claimed)
    await resume(desk, claimed)  # a replay of the same decision (crash, retry)
    assert refunds_by_order(desk.db) == {"C-2210": 1200}


async def test_full_remaining_amount_needs_the_amount_typed(desk: Desk) -> None:
    tid = ticket_id_by_order(desk.db, "C-1042")  # the injected ticket: full 89.90
    assert await process_ticket(desk, tid) == "awaiting_approval"
    approval = pending_approval(desk.db, tid)
    assert approval is not None and approval.typed_amount_required
    sid = staff_id(desk.db)
    with pytest.raises(InvalidInput, match="Type the amount"):
        await decide(desk, approval.id, sid, approve=True)
    with pytest.raises(InvalidInput, match="does not match"):
        await decide(desk, approval.id, sid, approve=True, typed_amount="89.00")
    assert refunds_by_order(desk.db) == {}
    assert await decide(desk, approval.id, sid, approve=True, typed_amount="89,90") == "draft_ready"
    assert refunds_by_order(desk.db) == {"C-1042": 8990}


async def test_a_denial_refunds_nothing_and_the_agent_drafts_a_reply(desk: Desk) -> None:
    tid = ticket_id_by_order(desk.db, "C-2210")
    await process_ticket(desk, tid)
    approval = pending_approval(desk.db, tid)
    assert approval is not None
    status = await decide(
        desk, approval.id, staff_id(desk.db), approve=False, reason="photo needed"
    )
    assert status == "draft_ready"
    assert refunds_by_order(desk.db) == {}
    draft = draft_of(desk.db, tid)
    assert draft is not None and "conseiller" in draft.body


async def test_a_stale_screen_cannot_approve(desk: Desk) -> None:
    tid = ticket_id_by_order(desk.db, "C-2210")
    await process_ticket(desk, tid)
    approval = pending_approval(desk.db, tid)
    assert approval is not None
    with pytest.raises(Conflict, match="another call"):
        await decide(desk, approval.id, staff_id(desk.db), approve=True, arguments_hash="0" * 64)
    assert refunds_by_order(desk.db) == {}


async def test_expired_approvals_refund_nothing(desk: Desk) -> None:
    desk.approval_ttl = timedelta(seconds=-1)
    tid = ticket_id_by_order(desk.db, "C-2210")
    await process_ticket(desk, tid)
    approval = pending_approval(desk.db, tid)
    assert approval is not None
    with pytest.raises(Conflict, match="expired"):
        await decide(desk, approval.id, staff_id(desk.db), approve=True)
    assert refunds_by_order(desk.db) == {}
    assert await expire_due(desk) == 0  # already expired by the attempt above


async def test_expire_due_finishes_the_run_with_a_refusal(desk: Desk) -> None:
    desk.approval_ttl = timedelta(seconds=-1)
    tid = ticket_id_by_order(desk.db, "C-2210")
    await process_ticket(desk, tid)
    assert await expire_due(desk) == 1
    assert ticket(desk.db, tid).status == "draft_ready"
    assert refunds_by_order(desk.db) == {}


async def test_the_trace_is_persisted(desk: Desk) -> None:
    tid = ticket_id_by_order(desk.db, "C-2210")
    await process_ticket(desk, tid)
    approval = pending_approval(desk.db, tid)
    assert approval is not None
    await decide(desk, approval.id, staff_id(desk.db), approve=True)
    with desk.db.read() as s:
        run = s.scalar(select(Run).where(Run.ticket_id == tid, Run.kind == "refund"))
        assert run is not None
        kinds = s.scalars(
            select(RunEvent.kind).where(RunEvent.run_id == run.id).order_by(RunEvent.seq)
        ).all()
        assert run.status == "completed" and run.requests >= 3 and run.input_tokens > 0
        assert s.scalar(select(Draft.author).where(Draft.ticket_id == tid)) == "agent"
    for kind in (
        "model_request",
        "model_response",
        "tool_finished",
        "approval_requested",
        "decision",
        "run_finished",
    ):
        assert kind in kinds


async def test_read_ticket_bounds_a_huge_text_and_labels_its_provenance(desk: Desk) -> None:
    import json

    from tether.tools import RunContext
    from tether_desk.agent import TICKET_TEXT_CAP, AgentDeps, TicketScope, read_ticket
    from tether_desk.thread_store import add_message

    with desk.db.write_connection() as c:  # the customer's latest message is huge
        add_message(c, 1, "customer", "x" * 1_000_000)
    scope = TicketScope(1, 1, "C-1042", "Marie", "s", "x" * 1_000_000)
    text = await read_ticket.invoke({}, RunContext(AgentDeps(desk.db, scope)))
    doc = json.loads(text)
    assert len(text) < TICKET_TEXT_CAP + 1_000
    assert doc["provenance"] == {"source": "ticket:1", "trusted": False}
    assert doc["content"]["order"] == "C-1042"
    assert doc["content"]["text"].endswith("[994000 characters omitted]")


async def test_a_decision_whose_run_never_resumed_is_recovered_once(desk: Desk) -> None:
    from tether_desk.decisions import recover_decided

    tid = ticket_id_by_order(desk.db, "C-2210")
    await process_ticket(desk, tid)
    approval = pending_approval(desk.db, tid)
    assert approval is not None
    claim_decision(desk, approval.id, staff_id(desk.db), approve=True)  # then the process stops
    assert ticket(desk.db, tid).status == "awaiting_approval"
    assert await recover_decided(desk) == 1
    assert ticket(desk.db, tid).status == "draft_ready"
    assert refunds_by_order(desk.db) == {"C-2210": 1200}
    assert await recover_decided(desk) == 0


async def test_the_whole_refund_path_on_postgresql(pg_db: Database) -> None:
    from tether_desk.scripted import DeskScriptedModel

    desk = Desk(pg_db, DeskScriptedModel())
    tid = ticket_id_by_order(pg_db, "C-2210")
    assert await process_ticket(desk, tid) == "awaiting_approval"
    approval = pending_approval(pg_db, tid)
    assert approval is not None
    state = await pg_db.state_store().load(approval.run_id)
    assert state is not None and state.version == approval.state_version and state.pending
    claimed = claim_decision(desk, approval.id, staff_id(pg_db), approve=True)
    assert await resume(desk, claimed) == "draft_ready"
    assert await resume(desk, claimed) == "draft_ready"  # claimed in the store: runs once
    assert refunds_by_order(pg_db) == {"C-2210": 1200}
    send_reply(pg_db, tid, staff_id(pg_db))
    with pg_db.read() as s:  # the statements written for both databases, on PostgreSQL
        mails = s.execute(select(Notification.key, Notification.to_addr)).all()
        staff = s.execute(select(Staff.id, Staff.email)).all()
        events = s.scalars(select(Message.body).where(Message.kind == "system")).all()
    approvals = {(f"approval:{approval.id}:{i}", email) for i, email in staff}
    assert approvals <= set(mails) and len(mails) == len(staff) + 1
    assert [to for key, to in mails if key.startswith("reply:")] == ["paul.martin@client.example"]
    assert events == ["Refund of 12.00 EUR approved by Camille (support)."]


async def test_a_proposal_is_stored_with_its_run_state_or_not_at_all(desk: Desk) -> None:
    """The run state, the approval and the ticket's status commit together: when the
    approval cannot be stored (another one started waiting meanwhile), no state is left
    behind for anyone to resume."""
    from sqlalchemy import insert

    from tether_desk.detector import Flag, flag_instructions
    from tether_desk.models import Approval

    tid = ticket_id_by_order(desk.db, "C-2210")

    def racing_detector(text: str, own: str | None) -> list[Flag]:
        with desk.db.write() as s:  # a proposal of another run lands first
            s.execute(
                insert(Approval).values(
                    ticket_id=tid,
                    run_id="other",
                    call_id="c",
                    tool="propose_refund",
                    arguments={},
                    arguments_hash="h",
                    amount_cents=100,
                    context={},
                    state_version=1,
                    expires_at=ticket(desk.db, tid).created_at + timedelta(days=1),
                )
            )
        return flag_instructions(text, own)

    desk.detector = racing_detector
    assert await process_ticket(desk, tid) == "failed"
    with desk.db.read() as s:
        run = s.scalar(select(Run).where(Run.ticket_id == tid, Run.kind == "refund"))
        assert run is not None and run.status == "failed"
        assert s.scalars(select(Approval.run_id).where(Approval.ticket_id == tid)).all() == [
            "other"
        ]
    assert await desk.db.state_store().load(run.id) is None


async def test_a_slow_models_trace_shows_while_it_thinks(db: Database) -> None:
    from tether_desk.scripted import DeskScriptedModel

    desk = Desk(db, DeskScriptedModel(delay=1.0))
    tid = ticket_id_by_order(db, "C-2210")
    task = asyncio.create_task(process_ticket(desk, tid))
    seen: list[str] = []
    while not task.done() and not seen:
        await asyncio.sleep(0.05)
        with db.read() as s:
            seen = list(
                s.scalars(
                    select(RunEvent.kind)
                    .join(Run, Run.id == RunEvent.run_id)
                    .where(Run.ticket_id == tid, Run.status == "running")
                )
            )
    assert seen == ["model_request"]  # the triage's request, written while the model thinks
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
