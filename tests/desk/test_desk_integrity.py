"""Decision integrity: the agent never reopens an answered ticket, a draft staff wrote is
never replaced, sending sends the version staff saw, and approvals are checked against
what the ledger can pay and what was already approved on the order."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from helpers import customer_id, pending_approval, refunds_by_order, staff_id, ticket
from sqlalchemy import select

from tether.clients import BaseChatClient, ChatOptions, ChatResponse
from tether.messages import Message
from tether.tools import ToolSpec
from tether_desk.approvals import screen
from tether_desk.decisions import claim_decision, decide
from tether_desk.errors import InvalidInput, RuleViolation, Stale
from tether_desk.models import Run, RunEvent
from tether_desk.pipeline import Desk, process_ticket
from tether_desk.scripted import DeskScriptedModel
from tether_desk.tickets import draft_of, open_ticket, save_draft, send_reply

MARIE = "marie.dupont@client.example"


class Gated(BaseChatClient):
    """The scripted model, held before its ``hold_at``-th agent turn until released."""

    def __init__(self, hold_at: int = 2) -> None:
        self.inner = DeskScriptedModel()
        self.hold_at = hold_at
        self.turns = 0
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        if tools:
            self.turns += 1
            if self.turns == self.hold_at:
                self.reached.set()
                await self.release.wait()
        return await self.inner.complete(messages, tools, options)


def new_ticket(desk: Desk, text: str, order: str = "C-1042") -> int:
    return open_ticket(desk.db, customer_id(desk.db, MARIE), order, "Colis casse", text)


async def test_the_agent_cannot_reopen_a_ticket_staff_answered(desk: Desk) -> None:
    gated = Gated()
    desk.client = gated
    tid = new_ticket(desk, "Le colis est arrive casse, remboursez 30 EUR svp.")
    running = asyncio.create_task(process_ticket(desk, tid))
    await asyncio.wait_for(gated.reached.wait(), 20)  # the agent is about to propose
    version = save_draft(
        desk.db, tid, "Nous ne pouvons pas rembourser.", "staff", expected_version=0
    )
    t = ticket(desk.db, tid)
    send_reply(desk.db, tid, staff_id(desk.db), ticket_version=t.version, draft_version=version)
    gated.release.set()
    assert await running == "answered"
    t = ticket(desk.db, tid)
    assert t.status == "answered" and t.reply == "Nous ne pouvons pas rembourser."
    assert pending_approval(desk.db, tid) is None and refunds_by_order(desk.db) == {}
    with desk.db.read() as s:
        run = s.scalars(select(Run).where(Run.ticket_id == tid, Run.kind == "refund")).one()
        kinds = s.scalars(select(RunEvent.kind).where(RunEvent.run_id == run.id)).all()
    assert run.status == "cancelled" and "staff answered" in run.outcome_reason
    assert "dropped_by_desk" in kinds


async def test_a_draft_staff_saved_is_not_replaced_by_the_agent(desk: Desk) -> None:
    tid = new_ticket(desk, "Le colis est arrive casse, remboursez 30 EUR svp.")
    assert await process_ticket(desk, tid) == "awaiting_approval"
    mine = "Bonjour Marie, je regarde votre remboursement. Camille"
    version = save_draft(desk.db, tid, mine, "staff", expected_version=0)
    approval = pending_approval(desk.db, tid)
    assert approval is not None
    status = await decide(
        desk,
        approval.id,
        staff_id(desk.db),
        approve=True,
        typed_amount="30.00",
        arguments_hash=approval.arguments_hash,
    )
    assert status == "draft_ready"
    draft = draft_of(desk.db, tid)
    assert draft is not None and draft.body == mine and draft.version == version
    assert draft.agent_body is not None and "30.00 EUR" in draft.agent_body
    t = ticket(desk.db, tid)
    send_reply(desk.db, tid, staff_id(desk.db), ticket_version=t.version, draft_version=version)
    assert ticket(desk.db, tid).reply == mine


async def test_sending_a_draft_that_changed_since_the_screen_sends_nothing(desk: Desk) -> None:
    tid = new_ticket(desk, "Le colis est arrive casse, remboursez 30 EUR svp.")
    save_draft(desk.db, tid, "First text.", "staff", expected_version=0)
    seen = ticket(desk.db, tid).version, 1  # what one screen shows
    save_draft(desk.db, tid, "Second text, by a colleague.", "staff", expected_version=1)
    with pytest.raises(Stale, match="nothing was sent") as caught:
        send_reply(desk.db, tid, staff_id(desk.db), ticket_version=seen[0], draft_version=seen[1])
    assert caught.value.current == "Second text, by a colleague."
    assert any("version 2" in c for c in caught.value.changes)
    assert ticket(desk.db, tid).reply is None
    with pytest.raises(Stale, match="not saved") as saved:
        save_draft(desk.db, tid, "My late edit.", "staff", expected_version=1)
    assert saved.value.yours == "My late edit."
    assert draft_of(desk.db, tid).body == "Second text, by a colleague."  # type: ignore[union-attr]


async def test_an_amount_the_ledger_cannot_pay_is_refused_before_approval(desk: Desk) -> None:
    one = new_ticket(desk, "Colis casse, remboursez 89.90 EUR.")
    two = new_ticket(desk, "Toujours casse, remboursez 89.90 EUR.")
    assert await process_ticket(desk, one) == "awaiting_approval"
    assert await process_ticket(desk, two) == "awaiting_approval"
    first, second = pending_approval(desk.db, one), pending_approval(desk.db, two)
    assert first is not None and second is not None
    sc = screen(desk.db, second.id)
    assert [o.approval_id for o in sc.committed.others] == [first.id]
    assert sc.committed.pending_cents == 8990
    sid = staff_id(desk.db)
    claim_decision(
        desk,
        first.id,
        sid,
        approve=True,
        typed_amount="89.90",
        arguments_hash=first.arguments_hash,
    )  # approved, not yet paid
    sc = screen(desk.db, second.id)
    assert sc.remaining_cents == 0 and not sc.payable and sc.typed_amount_required
    with pytest.raises(RuleViolation, match=r"Only 0\.00 EUR can still be refunded"):
        claim_decision(
            desk,
            second.id,
            sid,
            approve=True,
            typed_amount="89.90",
            arguments_hash=second.arguments_hash,
        )
    again = pending_approval(desk.db, two)
    assert again is not None and again.status == "pending"
    assert ticket(desk.db, two).status == "awaiting_approval"


async def test_staff_can_approve_a_lower_amount(desk: Desk) -> None:
    tid = new_ticket(desk, "Le colis est arrive casse, remboursez 30 EUR svp.")
    assert await process_ticket(desk, tid) == "awaiting_approval"
    approval = pending_approval(desk.db, tid)
    assert approval is not None
    with pytest.raises(InvalidInput, match=r"at most the 30\.00 EUR"):
        await decide(desk, approval.id, staff_id(desk.db), approve=True, approve_cents=4000)
    status = await decide(
        desk,
        approval.id,
        staff_id(desk.db),
        approve=True,
        typed_amount="10.00",
        approve_cents=1000,
        arguments_hash=approval.arguments_hash,
    )
    assert status == "draft_ready"
    assert refunds_by_order(desk.db) == {"C-1042": 1000}
    with desk.db.read() as s:
        results = s.scalars(select(RunEvent.data).where(RunEvent.kind == "tool_finished")).all()
    said = " ".join(str(d) for d in results)
    assert "Staff approved 10.00 EUR of the 30.00 EUR proposed" in said
    draft = draft_of(desk.db, tid)
    assert draft is not None and "10.00 EUR" in draft.body


async def test_a_second_approval_on_an_order_needs_the_typed_amount(desk: Desk) -> None:
    """Five one-cent refunds on one order: the first is one click, the others are not."""
    sid = staff_id(desk.db)
    for n in range(5):
        tid = new_ticket(desk, f"Petit geste {n}, remboursez 0.01 EUR.")
        assert await process_ticket(desk, tid) == "awaiting_approval"
        approval = pending_approval(desk.db, tid)
        assert approval is not None and approval.amount_cents == 1
        digest = approval.arguments_hash
        if n:
            assert screen(desk.db, approval.id).typed_amount_required
            with pytest.raises(InvalidInput, match="Type the amount"):
                await decide(desk, approval.id, sid, approve=True, arguments_hash=digest)
        typed = "0.01" if n else ""
        await decide(
            desk, approval.id, sid, approve=True, typed_amount=typed, arguments_hash=digest
        )
    assert refunds_by_order(desk.db) == {"C-1042": 5}


def test_over_http_an_approval_needs_its_arguments_hash_and_a_stale_send_says_what_changed(
    desk: Desk,
) -> None:
    from starlette.testclient import TestClient
    from webclient import hidden, login, wait_for

    from tether_desk.web.app import create_app

    tid = new_ticket(desk, "Le colis est arrive casse, remboursez 30 EUR svp.")
    app = create_app(desk)
    base = "http://127.0.0.1"
    with (
        TestClient(app, base_url=base, follow_redirects=True) as one,
        TestClient(app, base_url=base, follow_redirects=True) as two,
    ):
        csrf = login(one, "staff")
        csrf_two = login(two, "staff")
        wait_for(lambda: pending_approval(desk.db, tid) is not None)
        approval = pending_approval(desk.db, tid)
        assert approval is not None
        form = {"decision": "approve", "typed_amount": "30.00", "csrftoken": csrf}
        r = one.post(f"/staff/approvals/{approval.id}", data=form)
        assert r.status_code == 422
        assert pending_approval(desk.db, tid) is not None  # nothing was decided

        page = one.get(f"/staff/tickets/{tid}").text  # one screen...
        r = two.post(  # ...while a colleague writes the draft
            f"/staff/tickets/{tid}/draft",
            data={"body": "Texte de Camille 2.", "draft_version": "0", "csrftoken": csrf_two},
        )
        assert r.status_code == 200
        r = one.post(
            f"/staff/tickets/{tid}/draft",
            data={
                "body": "Mon texte.",
                "draft_version": hidden(page, "draft_version"),
                "csrftoken": csrf,
            },
        )
        assert r.status_code == 409 and "This changed while you were looking" in r.text
        assert "Mon texte." in r.text and "Texte de Camille 2." in r.text
        assert draft_of(desk.db, tid).body == "Texte de Camille 2."  # type: ignore[union-attr]
