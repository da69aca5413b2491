"""The plain write path of a refund ticket: every read and conditional update finds its
rows by an index (its cost does not grow with the desk's history), and the approval's
ledger check in one statement agrees with the approval screen's commitments."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from helpers import customer_id, pending_approval, staff_id, ticket_id_by_order
from sqlalchemy import event, insert, select

from tether_desk.approvals import commitments, owed
from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.decisions import decide
from tether_desk.models import Approval, Order, Refund
from tether_desk.orders import refunded_cents
from tether_desk.pipeline import Desk, process_ticket
from tether_desk.tickets import open_ticket, send_reply


async def test_every_read_and_update_of_a_refund_ticket_uses_an_index(desk: Desk) -> None:
    seen: dict[str, Any] = {}
    staff = staff_id(desk.db)
    tid = ticket_id_by_order(desk.db, "C-2210")

    @event.listens_for(desk.db.engine, "before_cursor_execute")
    def _statement(
        conn: Any, cursor: Any, statement: str, params: Any, ctx: Any, many: bool
    ) -> None:
        if statement.lstrip()[:6].upper() in ("SELECT", "UPDATE"):
            seen.setdefault(statement, params[0] if many else params)

    assert await process_ticket(desk, tid) == "awaiting_approval"
    approval = pending_approval(desk.db, tid)
    assert approval is not None
    assert await decide(desk, approval.id, staff, approve=True) == "draft_ready"
    send_reply(desk.db, tid, staff)
    event.remove(desk.db.engine, "before_cursor_execute", _statement)
    assert len(seen) > 15  # the whole path was seen

    walks = []
    raw = desk.db.engine.raw_connection()
    try:
        cursor = raw.cursor()
        for statement, params in seen.items():
            plan = [r[3] for r in cursor.execute(f"EXPLAIN QUERY PLAN {statement}", params)]
            bad = [
                step
                for step in plan
                if (step.startswith("SCAN ") and step != "SCAN CONSTANT ROW")
                or "ix_approvals_status" in step  # every approval of a status
            ]
            if bad:
                walks.append((" ".join(statement.split())[:120], bad))
    finally:
        raw.close()
    assert walks == []


@pytest.mark.parametrize("which", ["db", "pg_db"])
def test_the_ledger_check_agrees_with_the_screens_commitments(
    which: str, request: pytest.FixtureRequest
) -> None:
    """Two tickets on one order and one on another; approvals pending, approved and paid,
    approved and not yet paid (for less than proposed), denied: the one-statement totals
    of the decision's check equal the screen's list and the ledger, read apart."""
    db: Database = request.getfixturevalue(which)
    customer = customer_id(db, "paul.martin@client.example")
    with db.read() as s:
        number = s.scalar(select(Order.number).where(Order.customer_id == customer))
        other = s.execute(
            select(Order.customer_id, Order.number).where(Order.customer_id != customer).limit(1)
        ).one()
    assert number is not None
    first = open_ticket(db, customer, number, "Colis", "Rembourser")
    second = open_ticket(db, customer, number, "Encore", "Rembourser")
    elsewhere = open_ticket(db, other[0], other[1], "Autre", "Rembourser")
    rows = [
        (first, "approved", 1000, None, True),  # paid: in the ledger
        (first, "approved", 800, 500, False),  # approved for 5.00, not yet paid
        (second, "denied", 700, None, False),
        (second, "pending", 300, None, False),
        (second, "approved", 200, None, False),
        (elsewhere, "approved", 900, None, False),  # another order: not counted
    ]
    with db.write() as s:
        ids = []
        for i, (ticket, status, cents, approved, paid) in enumerate(rows):
            values = {
                "ticket_id": ticket,
                "run_id": f"run{i}",
                "call_id": "c1",
                "tool": "propose_refund",
                "arguments": {},
                "arguments_hash": "h",
                "amount_cents": cents,
                "context": {},
                "state_version": 1,
                "status": status,
                "expires_at": utcnow() + timedelta(hours=1),
                "approved_cents": approved,
            }
            ids.append(s.scalar(insert(Approval).returning(Approval.id), values))
            if paid:
                order_id = s.scalar(select(Order.id).where(Order.number == number))
                s.execute(
                    insert(Refund),
                    {"order_id": order_id, "amount_cents": cents, "idempotency_key": f"run{i}:c1"},
                )
    with db.read() as s:
        order_id = s.scalar(select(Order.id).where(Order.number == number))
        assert order_id is not None
        for approval_id, ticket in ((ids[3], second), (ids[0], first)):
            totals = owed(s.connection(), approval_id, ticket, order_id)
            listed = commitments(s, approval_id, ticket, order_id)
            assert totals.refunded_cents == refunded_cents(s, order_id) == 1000
            assert totals.approved_unpaid_cents == listed.approved_unpaid_cents
            assert totals.prior_approvals == listed.prior_approvals
        assert owed(s.connection(), ids[3], second, order_id).approved_unpaid_cents == 700
        assert owed(s.connection(), ids[3], second, order_id).prior_approvals == 3
        assert [o.approval_id for o in commitments(s, ids[3], second, order_id).others] == [
            ids[0],
            ids[1],
            ids[4],
        ]
