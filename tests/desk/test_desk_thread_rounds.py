"""A customer who writes while the desk works on the ticket (being triaged, or a refund
waiting for approval): the message is recorded, the round in progress goes on (the
approval screen shows what the customer wrote since), and once it ends the next round
runs on the whole thread, exactly once, wherever the reply lands against the decision."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest
from helpers import customer_id, pending_approval, refunds_by_order, staff_id, ticket
from helpers import ticket_id_by_order as by_order

from tether.clients import ChatOptions, ChatResponse
from tether.messages import Message
from tether.tools import ToolSpec
from tether_desk.approvals import screen
from tether_desk.db import Database
from tether_desk.decisions import claim_decision, decide, resume
from tether_desk.pipeline import Desk, load_scope, process_ticket
from tether_desk.scripted import DeskScriptedModel
from tether_desk.thread import RUNS_AGAIN, WROTE_DURING_ROUND, customer_reply, follow_up, thread
from tether_desk.tickets import save_draft, send_reply

PAUL = "paul.martin@client.example"
LEA = "lea.bernard@client.example"
MORE = "Il manque aussi le chargeur : 5 EUR."


class Hooked(DeskScriptedModel):
    """The scripted model, running ``hooks["triage"]`` or ``hooks["agent"]`` (once) in a
    thread before its next request of that kind (whose messages hold ``only``, if set):
    the customer writes meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.hooks: dict[str, Callable[[], object]] = {}
        self.only = ""

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        kind = "agent" if tools else "triage"
        if kind in self.hooks and self.only in "".join(m.text for m in messages):
            await asyncio.to_thread(self.hooks.pop(kind))
        return await super().complete(messages, tools, options)


def events(db: Database, ticket_id: int) -> list[str]:
    return [m.body for m in thread(db, ticket_id, staff=True) if m.kind == "system"]


def newest_customer_message(db: Database, ticket_id: int) -> int:
    return max(m.id for m in thread(db, ticket_id, staff=True) if m.kind == "customer")


async def test_a_reply_during_triage_runs_the_ticket_again_once_the_round_ends(
    db: Database,
) -> None:
    model = Hooked()
    desk = Desk(db, model)
    tid = by_order(db, "C-3107")  # "change my address": a person's
    lea = customer_id(db, LEA)
    said = "Et le colis est arrive casse, remboursez 20 EUR."
    model.hooks["triage"] = lambda: customer_reply(db, lea, tid, said)
    assert await process_ticket(desk, tid) == "new"  # ended needs_human, then rerun
    assert ticket(db, tid).round == 1
    assert events(db, tid) == [WROTE_DURING_ROUND, RUNS_AGAIN]
    assert [m.kind for m in thread(db, tid, staff=False)] == ["customer", "customer"]
    assert await process_ticket(desk, tid) == "awaiting_approval"
    approval = pending_approval(db, tid)
    assert approval is not None and approval.amount_cents == 2000
    origins = {o.argument: o.origin for o in screen(db, approval.id).origins}
    assert f"message #{newest_customer_message(db, tid)}" in origins["amount"]
    assert screen(db, approval.id).since == []  # this round read everything


async def _waiting(desk: Desk) -> tuple[int, int]:
    tid = by_order(desk.db, "C-2210")  # 12 EUR missing
    assert await process_ticket(desk, tid) == "awaiting_approval"
    approval = pending_approval(desk.db, tid)
    assert approval is not None and approval.amount_cents == 1200
    return tid, approval.id


async def _second_round(desk: Desk, tid: int) -> None:
    """The reply was followed up once: the next round proposes 5.00 from the new message."""
    assert ticket(desk.db, tid).status == "new"
    assert ticket(desk.db, tid).round == 1
    assert events(desk.db, tid).count(RUNS_AGAIN) == 1
    assert refunds_by_order(desk.db) == {"C-2210": 1200}  # the first proposal was decided
    assert await process_ticket(desk, tid) == "awaiting_approval"
    second = pending_approval(desk.db, tid)
    assert second is not None and second.amount_cents == 500
    origins = {o.argument: o.origin for o in screen(desk.db, second.id).origins}
    assert f"message #{newest_customer_message(desk.db, tid)}" in origins["amount"]


async def test_a_reply_while_a_refund_waits_is_shown_on_it_and_runs_after_the_decision(
    db: Database,
) -> None:
    desk = Desk(db, Hooked())
    tid, approval_id = await _waiting(desk)
    paul = customer_id(db, PAUL)
    assert not customer_reply(db, paul, tid, MORE)  # nothing interrupted
    assert ticket(db, tid).status == "awaiting_approval"
    waiting = screen(db, approval_id)
    assert [(i, text) for i, text, _ in waiting.since] == [(newest_customer_message(db, tid), MORE)]
    assert events(db, tid) == [WROTE_DURING_ROUND]
    assert WROTE_DURING_ROUND not in [m.body for m in thread(db, tid, staff=False)]
    await decide(desk, approval_id, staff_id(db), approve=True)
    await _second_round(desk, tid)


@pytest.mark.parametrize("when", ["after_the_claim", "during_the_resumed_run"])
async def test_a_reply_racing_the_decision_runs_the_next_round_once(
    db: Database, when: str
) -> None:
    model = Hooked()
    desk = Desk(db, model)
    tid, approval_id = await _waiting(desk)
    paul = customer_id(db, PAUL)
    claimed = claim_decision(desk, approval_id, staff_id(db), approve=True)
    if when == "after_the_claim":  # decided, not yet resumed
        assert not customer_reply(db, paul, tid, MORE)
    else:  # while the resumed agent writes its draft
        model.hooks["agent"] = lambda: customer_reply(db, paul, tid, MORE)
    assert await resume(desk, claimed) == "new"
    await _second_round(desk, tid)


async def test_a_reply_racing_the_decision_in_threads_runs_the_next_round_once(
    pg_db: Database,
) -> None:
    """The decision and the reply at the same moment, on PostgreSQL (row locks, not one
    writer): whichever commits first, the next round is started exactly once."""
    desk = Desk(pg_db, Hooked())
    tid, approval_id = await _waiting(desk)
    paul = customer_id(pg_db, PAUL)
    replied, _ = await asyncio.gather(
        asyncio.to_thread(customer_reply, pg_db, paul, tid, MORE),
        decide(desk, approval_id, staff_id(pg_db), approve=True),
    )
    assert not replied or ticket(pg_db, tid).status == "new"
    await _second_round(desk, tid)


async def test_a_reply_after_the_round_ended_reruns_it_and_the_late_follow_up_does_nothing(
    db: Database,
) -> None:
    desk = Desk(db, Hooked())
    tid = by_order(db, "C-3107")
    scope = load_scope(db, tid)  # what the first round read
    assert await process_ticket(desk, tid) == "needs_human"
    assert customer_reply(db, customer_id(db, LEA), tid, "Et remboursez 20 EUR, colis casse.")
    assert not follow_up(db, scope)  # the reply already started the next round
    assert ticket(db, tid).round == 1 and ticket(db, tid).status == "new"
    assert await process_ticket(desk, tid) == "awaiting_approval"
    assert not follow_up(db, scope)
    assert ticket(db, tid).round == 1 and RUNS_AGAIN not in events(db, tid)


async def test_a_reply_staff_answered_while_the_round_ran_does_not_rerun_it(
    db: Database,
) -> None:
    """The customer wrote during the round and a person answered after reading it: their
    reply stands (the agent's proposal is dropped) and nothing runs again."""
    model = Hooked()
    desk = Desk(db, model)
    tid, paul = by_order(db, "C-2210"), customer_id(db, PAUL)

    def both() -> None:
        assert not customer_reply(db, paul, tid, MORE)
        save_draft(db, tid, "Bonjour, nous remboursons 17 EUR (article et chargeur).", "staff")
        send_reply(db, tid, staff_id(db))

    model.hooks["agent"] = both
    assert await process_ticket(desk, tid) == "answered"
    assert ticket(db, tid).round == 0 and RUNS_AGAIN not in events(db, tid)
    assert pending_approval(db, tid) is None


def test_on_the_console_the_next_round_runs_as_soon_as_the_decision_is_applied(
    desk: Desk,
) -> None:
    """The plain console: the customer writes while the refund waits (the approval page
    shows it), staff approve, and the next round runs at once, not at the worker's next
    poll (5 s)."""
    from starlette.testclient import TestClient
    from webclient import hidden, login, wait_for

    from tether_desk.web.app import create_app

    base = "http://127.0.0.1"
    tid = by_order(desk.db, "C-2210")
    with (
        TestClient(create_app(desk), base_url=base, follow_redirects=True) as staff,
        TestClient(staff.app, base_url=base, follow_redirects=True) as paul,
    ):
        csrf = login(staff, "staff")
        wait_for(lambda: pending_approval(desk.db, tid) is not None)
        first = pending_approval(desk.db, tid)
        assert first is not None
        paul_csrf = login(paul, "paul")
        paul.post(f"/my/tickets/{tid}/reply", data={"text": MORE, "csrftoken": paul_csrf})
        page = staff.get(f"/staff/approvals/{first.id}").text
        assert 'id="wrote-since"' in page and "chargeur" in page
        form = {"decision": "approve", "csrftoken": csrf}
        form["arguments_hash"] = hidden(page, "arguments_hash")
        r = staff.post(f"/staff/approvals/{first.id}", data=form)
        assert r.status_code == 200
        wait_for(lambda: (pending_approval(desk.db, tid) or first).id != first.id, seconds=4)
    second = pending_approval(desk.db, tid)
    assert second is not None and second.amount_cents == 500
    assert ticket(desk.db, tid).round == 1
