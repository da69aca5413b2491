"""Assignment: a ticket belongs to one staff member or to nobody; the inbox filters by it,
and every row shows how long the customer has waited."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, func, select, update

from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.errors import NotFound
from tether_desk.models import Customer, Message, Order, Staff, Ticket
from tether_desk.tickets import PAGE_SIZE, Page, TicketRow

_ASSIGN = (
    update(Ticket)
    .where(Ticket.id == bindparam("ticket_id_"))
    .values(assignee_id=bindparam("assignee_"))
)


@dataclass(frozen=True, slots=True)
class Waiting:
    """How long the customer has waited for an answer, and whether it is past the target."""

    since: datetime
    words: str
    late: bool


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
    where = (
        Ticket.assignee_id.is_(None) if assignee_id is None else Ticket.assignee_id == assignee_id
    )
    with db.read_connection() as c:
        total = int(c.scalar(select(func.count(Ticket.id)).where(where)) or 0)
        pages = max(1, -(-total // PAGE_SIZE))
        page = min(max(1, page), pages)
        rows = c.execute(
            select(
                Ticket.id,
                Ticket.subject,
                Order.number,
                Customer.name,
                Ticket.status,
                Ticket.category,
                Ticket.created_at,
            )
            .join(Order, Order.id == Ticket.order_id)
            .join(Customer, Customer.id == Ticket.customer_id)
            .where(where)
            .order_by(Ticket.id.desc())
            .limit(PAGE_SIZE)
            .offset((page - 1) * PAGE_SIZE)
        ).all()
    return Page([TicketRow(*r) for r in rows], page, pages, total)


def _words(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d}"
    return f"{hours // 24} days"


_LAST_ASKED = (
    select(func.max(Message.created_at))
    .where(Message.ticket_id == Ticket.id, Message.kind == "customer")
    .scalar_subquery()
)
_ROW_FACTS = (
    select(Ticket.id, Ticket.status, Staff.name, _LAST_ASKED)
    .outerjoin(Staff, Staff.id == Ticket.assignee_id)
    .where(Ticket.id.in_(bindparam("ids", expanding=True)))
)


def row_facts(
    db: Database, rows: list[TicketRow], target: timedelta
) -> tuple[dict[int, Waiting], dict[int, str]]:
    """For a page's rows, in one query: since when each open ticket's customer waits (their
    latest message) against ``target``, and whom each ticket is assigned to."""
    if not rows:
        return {}, {}
    with db.read_connection() as c:
        found = c.execute(_ROW_FACTS, {"ids": [r.id for r in rows]}).all()
    now = utcnow()
    waits, owners = {}, {}
    for ticket_id, status, owner, since in found:
        if owner is not None:
            owners[int(ticket_id)] = str(owner)
        if status != "answered" and since is not None:
            waits[int(ticket_id)] = Waiting(since, _words(now - since), now - since > target)
    return waits, owners
