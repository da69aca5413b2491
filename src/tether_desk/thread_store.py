"""Appending to a ticket's thread, in the caller's transaction (see :mod:`tether_desk.thread`)."""

from __future__ import annotations

from sqlalchemy import Connection, insert, select

from tether_desk.clock import utcnow
from tether_desk.models import Message, Staff
from tether_desk.money import format_cents

_INSERT = insert(Message).returning(Message.id)


def add_message(
    connection: Connection,
    ticket_id: int,
    kind: str,
    body: str,
    *,
    author_id: int | None = None,
    public: bool = True,
) -> int:
    """Append a message to the ticket's thread in the caller's transaction; its id."""
    values = {"ticket_id": ticket_id, "kind": kind, "author_id": author_id, "body": body}
    found = connection.scalar(_INSERT, {**values, "public": public, "created_at": utcnow()})
    return int(found or 0)


def decision_event(
    connection: Connection, ticket_id: int, staff_id: int, status: str, amount_cents: int
) -> int:
    """Record in the thread that staff approved or denied a refund ("refund of 30.00 EUR
    approved by Camille"): the customer sees an approval, staff see both."""
    name = connection.scalar(select(Staff.name).where(Staff.id == staff_id)) or "staff"
    text = f"Refund of {format_cents(amount_cents)} EUR {status} by {name}."
    public = status == "approved"
    return add_message(connection, ticket_id, "system", text, author_id=staff_id, public=public)
