"""Small helpers shared by the desk's tests."""

from __future__ import annotations

import asyncio

from sqlalchemy import insert, select

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


def add_ticket(db: Database, body: str, paid: int = 4000, number: str | None = None) -> int:
    """A new ticket on an order of its own (``number``, or the next ``C-9xxx``)."""
    with db.write() as s:
        customer = s.scalar(select(Customer.id).where(Customer.email.like("paul%")))
        count = len(s.scalars(select(Order.id)).all())
        order = s.execute(
            insert(Order)
            .values(
                number=number or f"C-{9000 + count:04d}",
                customer_id=customer,
                status="delivered",
                amount_paid_cents=paid,
                shipping_address="3 quai Voltaire, 75007 Paris",
                payment_method="paypal",
            )
            .returning(Order.id)
        ).scalar_one()
        return int(
            s.execute(
                insert(Ticket)
                .values(customer_id=customer, order_id=order, subject="Colis", body=body)
                .returning(Ticket.id)
            ).scalar_one()
        )


async def until_status(db: Database, ticket_id: int, *statuses: str) -> str:
    """The ticket's status once it is one of ``statuses`` (a minute at most)."""
    for _ in range(1200):
        with db.read_connection() as c:
            status = c.scalar(select(Ticket.status).where(Ticket.id == ticket_id))
        if status in statuses:
            return str(status)
        await asyncio.sleep(0.05)
    raise AssertionError(f"ticket {ticket_id} stayed {status}")
