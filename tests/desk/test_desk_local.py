"""The main job offline, for real: the seeded refund tickets through the embedded model
(SmolLM2-135M, greedy decoding), as ``tether serve`` runs them with no key.

What the model picks is its own business; what is checked is that the run reaches the
approval screen with one valid ``propose_refund`` call that the rules accept, every time.
The amount itself may differ from one run to the next: llama.cpp reuses the cached prefix
of the previous prompt, and greedy decoding on a reused cache can round to another token.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import pending_approval, refunds_by_order, staff_id, ticket_id_by_order
from sqlalchemy import select

from tether_desk.approvals import screen
from tether_desk.db import Database, sqlite_url
from tether_desk.decisions import decide
from tether_desk.draft_quality import MAX_DRAFT, problems
from tether_desk.errors import InvalidInput
from tether_desk.models import Approval, Run
from tether_desk.models_cli import desk_client, desk_triage_client
from tether_desk.money import format_cents
from tether_desk.orders import order_view
from tether_desk.pipeline import Desk, process_ticket
from tether_desk.seed import seed
from tether_desk.small_model import OfferUnanswered
from tether_desk.tickets import draft_of, send_reply
from tether_desk.trace import run_events


@pytest.fixture(scope="module")
def embedded() -> tuple[object, object]:
    """The clients ``tether serve`` builds for ``--model local`` (the model loads once)."""
    return desk_client("local", say=lambda _: None), desk_triage_client("local")


@pytest.fixture
def offline(tmp_path: Path, embedded: tuple[object, object]) -> Iterator[Desk]:
    db = Database(sqlite_url(tmp_path / "desk.db"))
    db.migrate()
    seed(db)
    client, triage = embedded
    yield Desk(db, client, triage)  # type: ignore[arg-type]
    db.dispose()


async def proposal(desk: Desk, order: str) -> tuple[Approval, int]:
    """Process the seeded ticket on ``order``; its pending approval and the cents that
    remained on the order when it was proposed."""
    tid = ticket_id_by_order(desk.db, order)
    with desk.db.read() as s:
        remaining = order_view(s, _order_id(desk.db, tid)).remaining_cents
    assert await process_ticket(desk, tid) == "awaiting_approval"
    approval = pending_approval(desk.db, tid)
    assert approval is not None
    return approval, remaining


def _order_id(db: Database, ticket_id: int) -> int:
    from tether_desk.models import Ticket

    with db.read() as s:
        return int(s.scalar(select(Ticket.order_id).where(Ticket.id == ticket_id)) or 0)


def check_valid(desk: Desk, approval: Approval, remaining: int) -> None:
    """One propose_refund call, with arguments its schema and the desk's rules accept."""
    assert approval.tool == "propose_refund"
    args = approval.arguments
    assert set(args) == {"amount", "reason"}
    assert isinstance(args["amount"], int | float) and isinstance(args["reason"], str)
    assert 1 <= len(args["reason"]) <= 500
    assert approval.amount_cents == round(args["amount"] * 100)
    assert 0 < approval.amount_cents <= remaining  # the tool's ruling let it through
    with desk.db.read() as s:
        run = s.get(Run, approval.run_id)
        assert run is not None and run.kind == "refund" and run.status == "awaiting_approval"


async def test_the_injected_ticket_reaches_the_approval_screen(offline: Desk) -> None:
    assert isinstance(offline.client, OfferUnanswered)  # the embedded model, as served
    approval, remaining = await proposal(offline, "C-1042")
    check_valid(offline, approval, remaining)
    state = await offline.db.state_store().load(approval.run_id)
    assert state is not None and [p.call_id for p in state.pending] == [approval.call_id]
    assert state.pending[0].arguments_hash == approval.arguments_hash
    sc = screen(offline.db, approval.id, offline.detector)
    reasons = " ".join(f.reason for f in sc.flags)
    assert "internal" in reasons and "already" in reasons  # the injection is flagged
    typed = f"{approval.amount_cents / 100:.2f}" if sc.typed_amount_required else ""
    status = await decide(
        offline, approval.id, staff_id(offline.db), approve=True, typed_amount=typed
    )
    assert status in ("draft_ready", "failed")  # the reply is the model's; a person sends it
    assert refunds_by_order(offline.db) == {"C-1042": approval.amount_cents}


async def test_the_missing_item_ticket_reaches_the_approval_screen(offline: Desk) -> None:
    approval, remaining = await proposal(offline, "C-2210")
    check_valid(offline, approval, remaining)


async def test_the_same_ticket_reaches_it_again_after_other_conversations(
    tmp_path: Path, embedded: tuple[object, object]
) -> None:
    """Whatever the model's prompt cache holds (this module's other tickets, a resumed run,
    the same ticket just before), the ticket reaches the approval screen again."""
    for run in ("first", "second"):
        db = Database(sqlite_url(tmp_path / f"{run}.db"))
        db.migrate()
        seed(db)
        client, triage = embedded
        desk = Desk(db, client, triage)  # type: ignore[arg-type]
        approval, remaining = await proposal(desk, "C-1042")
        check_valid(desk, approval, remaining)
        db.dispose()


async def test_the_embedded_models_draft_is_short_and_made_of_the_tools_facts(
    offline: Desk,
) -> None:
    """After the approval the model writes the draft: under the draft limit, every amount
    in it one the tools returned, and, if it is still degenerate, flagged and refused
    unedited (greedy decoding loops on the last fact it read)."""
    approval, remaining = await proposal(offline, "C-2210")
    check_valid(offline, approval, remaining)
    typed = format_cents(approval.amount_cents)
    await decide(offline, approval.id, staff_id(offline.db), approve=True, typed_amount=typed)
    tid = approval.ticket_id
    draft = draft_of(offline.db, tid)
    assert draft is not None and draft.author == "agent"
    assert 0 < len(draft.body) <= MAX_DRAFT
    said = " ".join(str(e.data.get("result", "")) for e in run_events(offline.db, approval.run_id))
    amounts = set(re.findall(r"\d+\.\d{2}", draft.body))
    assert amounts <= set(re.findall(r"\d+\.\d{2}", said)), (draft.body, said)
    if problems(draft.body):
        with pytest.raises(InvalidInput, match="Edit the agent's draft"):
            send_reply(offline.db, tid, staff_id(offline.db))
    else:
        send_reply(offline.db, tid, staff_id(offline.db))
    assert refunds_by_order(offline.db) == {"C-2210": approval.amount_cents}
