"""Appending to a ticket's thread, in the caller's transaction (see :mod:`tether_desk.thread`)."""

from __future__ import annotations

from sqlalchemy import Boolean, Connection, DateTime, String, bindparam, func, insert, select

from tether_desk.clock import utcnow
from tether_desk.models import Message, Staff
from tether_desk.money import format_cents

_INSERT = insert(Message).returning(Message.id)
_STAFF_NAME = select(Staff.name).where(Staff.id == bindparam("author_id")).scalar_subquery()
_DECISION_EVENT = (
    insert(Message)
    .values(
        ticket_id=bindparam("ticket_id"),
        kind="system",
        author_id=bindparam("author_id"),
        body=bindparam("text", type_=String) + func.coalesce(_STAFF_NAME, "staff") + ".",
        public=bindparam("public", type_=Boolean),
        created_at=bindparam("created_at", type_=DateTime),
    )
    .returning(Message.id)
)
"""The decision's event with the staff member's name, in one statement."""


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
    text = f"Refund of {format_cents(amount_cents)} EUR {status} by "
    values = {"ticket_id": ticket_id, "author_id": staff_id, "text": text}
    found = connection.scalar(
        _DECISION_EVENT, {**values, "public": status == "approved", "created_at": utcnow()}
    )
    return int(found or 0)
