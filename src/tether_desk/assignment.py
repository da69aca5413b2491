"""Assignment: a ticket belongs to one staff member or to nobody; the inbox filters by it
(:mod:`tether_desk.inbox`)."""

from __future__ import annotations

from sqlalchemy import bindparam, select, update

from tether_desk.db import Database
from tether_desk.errors import NotFound
from tether_desk.inbox import inbox_page
from tether_desk.models import Staff, Ticket
from tether_desk.tickets import Page

_ASSIGN = (
    update(Ticket)
    .where(Ticket.id == bindparam("ticket_id_"))
    .values(assignee_id=bindparam("assignee_"))
)


def staff_members(db: Database) -> list[tuple[int, str]]:
    """Every staff member (id, name), by name."""
    with db.read() as s:
        rows = s.execute(select(Staff.id, Staff.name).order_by(Staff.name)).all()
    return [(int(i), str(n)) for i, n in rows]


def assign(db: Database, ticket_id: int, assignee_id: int | None) -> None:
    """Assign the ticket to a staff member, or to nobody (``None``)."""
    with db.write_connection() as c:
        known = select(Staff.id).where(Staff.id == assignee_id)
        if assignee_id is not None and c.scalar(known) is None:
            raise NotFound(f"There is no staff member {assignee_id}.")
        done = c.execute(_ASSIGN, {"ticket_id_": ticket_id, "assignee_": assignee_id})
        if not done.rowcount:
            raise NotFound(f"There is no ticket {ticket_id}.")


def assignee_of(db: Database, ticket_id: int) -> int | None:
    """Who the ticket is assigned to."""
    with db.read_connection() as c:
        return c.scalar(select(Ticket.assignee_id).where(Ticket.id == ticket_id))


def assigned_inbox(db: Database, assignee_id: int | None, page: int = 1) -> Page:
    """The tickets assigned to ``assignee_id`` (``None``: unassigned), newest first."""
    return inbox_page(db, page, assignee=assignee_id).page
