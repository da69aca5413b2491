"""The staff inbox: one page of tickets with everything its rows show, in one statement.

A page's ids come from an index alone (all tickets: the primary key; a status:
(status, id); an assignee or "unassigned": (assignee_id, id)), by keyset (``before`` /
``after`` a ticket id) or by offset; then, for those 25 ids only, the ticket, its order
and customer, the staff member it is assigned to, since when its customer waits (their
latest message) and the list's count. No query per row, and no second query for the
rows' facts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Executable, Subquery, bindparam, case, func, select

from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.models import Customer, Message, Order, Staff, Ticket, TicketCount
from tether_desk.tickets import PAGE_SIZE, Page, TicketRow, page_of

Mode = Literal["offset", "before", "after"]
Owner = Literal["any", "none", "one"]


@dataclass(frozen=True, slots=True)
class Waiting:
    """How long the customer has waited for an answer, and whether it is past the target."""

    since: datetime
    words: str
    late: bool


@dataclass(frozen=True, slots=True)
class InboxPage:
    """A page of the inbox: its tickets, and per ticket whom it is assigned to and how
    long its customer has waited (open tickets with a customer message only)."""

    page: Page
    waits: dict[int, Waiting]
    owners: dict[int, str]


def waiting_words(delta: timedelta) -> str:
    """``42 min``, ``5 h 07``, ``3 days``."""
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
_STATEMENTS: dict[tuple[bool, Owner, Mode], Executable] = {}


def _count(status: bool, owner: Owner) -> Any:
    """How many tickets the list has: from ``ticket_counts`` (no scan) without an
    assignee filter, else from the (assignee_id) index."""
    if owner == "any":
        if status:
            return select(TicketCount.n).where(TicketCount.status == bindparam("status"))
        return select(func.coalesce(func.sum(TicketCount.n), 0))
    other = Ticket.__table__.alias("counted")
    where = (
        other.c.assignee_id.is_(None)
        if owner == "none"
        else other.c.assignee_id == bindparam("owner")
    )
    counted = select(func.count()).select_from(other).where(where)
    return counted.where(other.c.status == bindparam("status")) if status else counted


def _statement(status: bool, owner: Owner, mode: Mode) -> Executable:
    """The page's rows, their facts and the list's count (built once per shape)."""
    key = (status, owner, mode)
    if key in _STATEMENTS:
        return _STATEMENTS[key]
    ids = select(Ticket.id)
    if status:
        ids = ids.where(Ticket.status == bindparam("status"))
    if owner == "none":
        ids = ids.where(Ticket.assignee_id.is_(None))
    elif owner == "one":
        ids = ids.where(Ticket.assignee_id == bindparam("owner"))
    chosen = _dense_or_offset() if (not status and owner == "any" and mode == "offset") else None
    chosen = chosen if chosen is not None else page_of(ids, mode)
    statement = (
        select(
            Ticket.id,
            Ticket.subject,
            Order.number,
            Customer.name,
            Ticket.status,
            Ticket.category,
            Ticket.created_at,
            Staff.name,
            _LAST_ASKED,
            _count(status, owner).scalar_subquery(),
        )
        .select_from(chosen)
        .join(Ticket, Ticket.id == chosen.c.id)
        .join(Order, Order.id == Ticket.order_id)
        .join(Customer, Customer.id == Ticket.customer_id)
        .outerjoin(Staff, Staff.id == Ticket.assignee_id)
        .order_by(Ticket.id.desc())
    )
    _STATEMENTS[key] = statement
    return statement


def _dense_or_offset() -> Subquery:
    """All tickets' page at an offset without stepping over the tickets before it: while
    the ids have no gap (the highest minus the lowest plus one is the count, which
    ``ticket_counts`` keeps), the page at offset N starts at the highest id minus N, an
    index seek; with a gap, at the id found by offset. One statement: one state read."""
    highest = select(func.max(Ticket.id)).scalar_subquery()
    lowest = select(func.min(Ticket.id)).scalar_subquery()
    total = select(func.coalesce(func.sum(TicketCount.n), 0)).scalar_subquery()
    newest = Ticket.id.desc()
    stepped = select(Ticket.id).order_by(newest).limit(1).offset(bindparam("offset"))
    start = case(
        (highest - lowest + 1 == total, highest - bindparam("offset")),
        else_=stepped.scalar_subquery(),
    )
    return select(Ticket.id).where(Ticket.id <= start).order_by(newest).limit(PAGE_SIZE).subquery()


def inbox_page(
    db: Database,
    page: int = 1,
    *,
    status: str | None = None,
    assignee: int | Literal["any"] | None = "any",
    before: int | None = None,
    after: int | None = None,
    wait_target: timedelta = timedelta(hours=4),
) -> InboxPage:
    """Tickets newest first, of one ``status`` or all, assigned to ``assignee`` (a staff
    id; ``None``: unassigned; ``"any"``: everyone's); ``before``/``after`` a ticket id: the
    page of older/newer tickets next to it (``page`` then only numbers it)."""
    page = max(1, page)
    owner: Owner = "any" if assignee == "any" else "none" if assignee is None else "one"
    params: dict[str, Any] = {}
    if status:
        params["status"] = status
    if owner == "one":
        params["owner"] = assignee
    mode: Mode
    if before is not None:
        mode, params["before"] = "before", before
    elif after is not None:
        mode, params["after"] = "after", after
    else:
        mode, params["offset"] = "offset", (page - 1) * PAGE_SIZE
    statement = _statement(bool(status), owner, mode)
    with db.read_connection() as c:
        result = c.execute(statement, params).all()
        if result:
            total = int(result[0][-1] or 0)
        else:
            total = int(c.scalar(_count(bool(status), owner), params) or 0)
        pages = max(1, -(-total // PAGE_SIZE))
        if not result and mode == "offset" and page > pages:  # past the end: the last page
            page = pages
            params["offset"] = (page - 1) * PAGE_SIZE
            result = c.execute(statement, params).all()
    page = min(page, pages)
    rows, waits, owners = [], {}, {}
    now = utcnow()
    for r in result:
        row = TicketRow(*r[:7])
        rows.append(row)
        if r[7] is not None:
            owners[row.id] = str(r[7])
        since = r[8]
        if since is not None and row.status != "answered":
            waited = now - since
            waits[row.id] = Waiting(since, waiting_words(waited), waited > wait_target)
    newer = rows[0].id if rows and page > 1 else None
    older = rows[-1].id if rows and page < pages else None
    return InboxPage(Page(rows, page, pages, total, newer, older), waits, owners)
