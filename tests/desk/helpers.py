"""Small helpers shared by the desk's tests."""

from __future__ import annotations

from sqlalchemy import select

from tether_desk.db import Database
from tether_desk.models import Approval, Customer, Order, Refund, Staff, Ticket


def ticket_id_by_order(db: Database, number: str) -> int:
    with db.read() as s:
        return int(
            s.scalar(
                select(Ticket.id)
                .join(Order, Order.id == Ticket.order_id)
                .where(Order.number == number)
            )  # type: ignore[arg-type]
        )


def customer_id(db: Database, email: str) -> int:
    with db.read() as s:
        return int(s.scalar(select(Customer.id).where(Customer.email == email)))  # type: ignore[arg-type]


def staff_id(db: Database) -> int:
    with db.read() as s:
        return int(s.scalar(select(Staff.id)))  # type: ignore[arg-type]


def refunds_by_order(db: Database) -> dict[str, int]:
    with db.read() as s:
        rows = s.execute(
            select(Order.number, Refund.amount_cents).join(Order, Order.id == Refund.order_id)
        ).all()
    out: dict[str, int] = {}
    for number, cents in rows:
        out[number] = out.get(number, 0) + cents
    return out


def pending_approval(db: Database, ticket_id: int) -> Approval | None:
    with db.read() as s:
        a = s.scalar(
            select(Approval).where(Approval.ticket_id == ticket_id, Approval.status == "pending")
        )
        if a is not None:
            s.expunge(a)
        return a


def ticket(db: Database, ticket_id: int) -> Ticket:
    with db.read() as s:
        t = s.get(Ticket, ticket_id)
        assert t is not None
        s.expunge(t)
        return t
