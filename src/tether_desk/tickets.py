"""Tickets: opened by an authenticated customer on one of *their* orders, listed per
customer (a customer sees only their own) and in the staff inbox, page by page.

The order of a ticket comes from the customer's account (they pick one of their orders),
never from the ticket's text. Text is bounded and stripped of control characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Connection,
    Executable,
    Select,
    Subquery,
    bindparam,
    case,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.draft_quality import problems
from tether_desk.errors import InvalidInput, NotFound, RateLimited, Stale
from tether_desk.models import Customer, Draft, Order, Ticket, TicketCount
from tether_desk.notify import queue_reply_to
from tether_desk.orders import customer_order_id
from tether_desk.thread_store import add_message

MAX_SUBJECT = 200
MAX_BODY = 8_000
PAGE_SIZE = 25
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

_INSERT_TICKET = insert(Ticket).returning(Ticket.id)
_SET_TICKET = (
    update(Ticket)
    .where(Ticket.id == bindparam("ticket_id_"), Ticket.status != "answered")
    .values(version=Ticket.version + 1)
)
"""Every change of a ticket's state: never out of ``answered`` (a reply the customer
read is final), and its version grows."""
_TICKET_AND_DRAFT = (
    select(
        Ticket.status,
        Ticket.version,
        Ticket.replied_at,
        Draft.id,
        Draft.body,
        Draft.version,
        Draft.author,
        Customer.email,
        Customer.name,
        Ticket.subject,
    )
    .join(Customer, Customer.id == Ticket.customer_id)
    .outerjoin(Draft, Draft.ticket_id == Ticket.id)
    .where(Ticket.id == bindparam("ticket_id_"))
)
"""What sending checks, and whom the reply's e-mail goes to."""
_DRAFT_READY = _SET_TICKET.values(status="draft_ready")
_SEND_DRAFT = (
    update(Draft)
    .where(
        Draft.id == bindparam("draft_id_"),
        Draft.version == bindparam("draft_version_"),
        Draft.sent_at.is_(None),
    )
    .values(version=Draft.version + 1)
)
_SEND_TICKET = _SET_TICKET.where(
    Ticket.version == bindparam("ticket_version_"), Ticket.status != "awaiting_approval"
)


@dataclass(frozen=True, slots=True)
class TicketRow:
    """One line of a ticket list."""

    id: int
    subject: str
    order: str
    customer: str
    status: str
    category: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a list: its rows, the page number, how many pages and tickets there are.
    ``newer``/``older`` are the ids the neighbouring pages start after (keyset links), or
    ``None`` at either end."""

    rows: list[TicketRow]
    page: int
    pages: int
    total: int
    newer: int | None = None
    older: int | None = None


def clean_text(value: str, field: str, limit: int) -> str:
    """``value`` without control characters, trimmed, non-empty and at most ``limit``."""
    text = _CONTROL.sub("", value).strip()
    if not text:
        raise InvalidInput(f"The {field} is empty; write a few words.")
    if len(text) > limit:
        raise InvalidInput(
            f"The {field} is {len(text):,} characters long; keep it under {limit:,}."
        )
    return text


_RECENT = select(func.count(Ticket.id)).where(
    Ticket.customer_id == bindparam("customer_id"), Ticket.created_at >= bindparam("since")
)


@dataclass(frozen=True, slots=True)
class TicketRate:
    """At most ``tickets`` new tickets per customer per ``window``."""

    tickets: int
    window: timedelta


def open_ticket(
    db: Database,
    customer_id: int,
    order_number: str,
    subject: str,
    body: str,
    *,
    rate: TicketRate | None = None,
) -> int:
    """Open a ticket for the customer on their order ``order_number``; returns its id.
    ``rate``: refuse (:class:`RateLimited`, before anything is stored or run) a ticket
    past the customer's allowance, counted in the same transaction."""
    subject = clean_text(subject, "subject", MAX_SUBJECT)
    body = clean_text(body, "message", MAX_BODY)
    with db.write_connection() as c:
        if rate is not None:
            since = utcnow() - rate.window
            recent = int(c.scalar(_RECENT, {"customer_id": customer_id, "since": since}) or 0)
            if recent >= rate.tickets:
                minutes = max(1, round(rate.window.total_seconds() / 60))
                raise RateLimited(
                    f"You opened {recent} tickets in the last {minutes} minute(s); "
                    "we are on them. Wait a few minutes before opening another.",
                    int(rate.window.total_seconds()),
                )
        order_id = customer_order_id(c, customer_id, order_number)
        values = {"customer_id": customer_id, "order_id": order_id, "subject": subject}
        return int(c.scalar(_INSERT_TICKET, {**values, "body": body}) or 0)


def set_ticket(connection: Connection, ticket_id: int, **values: object) -> bool:
    """Set columns of a ticket (and its ``updated_at``, and grow its version) in the
    caller's transaction, unless it is ``answered``; True if it changed."""
    done = connection.execute(
        _SET_TICKET, {"ticket_id_": ticket_id, "updated_at": utcnow(), **values}
    )
    return bool(done.rowcount)


def agent_draft(connection: Connection, ticket_id: int, body: str) -> None:
    """Write the agent's draft for a ticket and mark the ticket ``draft_ready`` (unless a
    reply was sent meanwhile), in the caller's transaction: one upsert. A draft staff
    wrote is never replaced: the agent's text is kept beside it (``agent_body``), and a
    sent reply never changes."""
    statement = _DRAFT_UPSERTS.get(connection.dialect.name)
    if statement is None:
        statement = _DRAFT_UPSERTS[connection.dialect.name] = _draft_upsert(connection)
    now = utcnow()
    connection.execute(statement, {"ticket_id_": ticket_id, "body_": body, "now_": now})
    connection.execute(_DRAFT_READY, {"ticket_id_": ticket_id, "updated_at": now})
    add_message(connection, ticket_id, "agent", body, public=False)


_DRAFT_UPSERTS: dict[str, Executable] = {}


def _draft_upsert(connection: Connection) -> Executable:
    make = postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert
    statement = make(Draft).values(
        ticket_id=bindparam("ticket_id_"),
        body=bindparam("body_"),
        author="agent",
        updated_at=bindparam("now_"),
    )
    by_staff = Draft.author == "staff"
    return statement.on_conflict_do_update(
        index_elements=[Draft.ticket_id],
        set_={
            "body": case((by_staff, Draft.body), else_=statement.excluded.body),
            "author": case((by_staff, Draft.author), else_=statement.excluded.author),
            "agent_body": case((by_staff, statement.excluded.body), else_=None),
            "version": case((by_staff, Draft.version), else_=Draft.version + 1),
            "updated_at": statement.excluded.updated_at,
        },
        where=Draft.sent_at.is_(None),
    )


_PAGE_COLUMNS = (
    Ticket.id,
    Ticket.subject,
    Order.number,
    Customer.name,
    Ticket.status,
    Ticket.category,
    Ticket.created_at,
)
_PAGES: dict[tuple[str, str], Executable] = {}
_OTHER = Ticket.__table__.alias("other")
_COUNTS: dict[str, Any] = {
    "all": select(func.coalesce(func.sum(TicketCount.n), 0)),
    "status": select(TicketCount.n).where(TicketCount.status == bindparam("status")),
    "customer": select(func.count(_OTHER.c.id)).where(
        _OTHER.c.customer_id == bindparam("customer_id")
    ),
}
"""How many tickets a list has: from ``ticket_counts`` (no scan), or a customer's own from
the (customer_id, id) index."""


def page_of(ids: Select[Any], mode: str) -> Subquery:
    """One page of the ticket ids ``ids`` selects: ``before``/``after`` an id (keyset,
    parameters of those names) or at an ``offset``, newest first."""
    if mode == "before":
        ids = ids.where(Ticket.id < bindparam("before")).order_by(Ticket.id.desc())
    elif mode == "after":
        ids = ids.where(Ticket.id > bindparam("after")).order_by(Ticket.id.asc())
    else:
        ids = ids.order_by(Ticket.id.desc()).offset(bindparam("offset"))
    return ids.limit(PAGE_SIZE).subquery()


def _page_statement(where: str, mode: str) -> Executable:
    """A page's rows and the list's count, in one statement: first the page's ids from an
    index alone (all tickets: the primary key; ``status``: (status, id); ``customer``:
    (customer_id, id)), by keyset (``before``/``after`` an id) or by offset, then those rows
    and their order and customer by primary key."""
    key = (where, mode)
    if key in _PAGES:
        return _PAGES[key]
    ids = select(Ticket.id)
    if where == "status":
        ids = ids.where(Ticket.status == bindparam("status"))
    elif where == "customer":
        ids = ids.where(Ticket.customer_id == bindparam("customer_id"))
    page = page_of(ids, mode)
    statement = (
        select(*_PAGE_COLUMNS, _COUNTS[where].scalar_subquery())
        .select_from(page)
        .join(Ticket, Ticket.id == page.c.id)
        .join(Order, Order.id == Ticket.order_id)
        .join(Customer, Customer.id == Ticket.customer_id)
        .order_by(Ticket.id.desc())
    )
    _PAGES[key] = statement
    return statement


def _rows(
    db: Database,
    where: str,
    params: dict[str, Any],
    page: int,
    before: int | None,
    after: int | None,
) -> Page:
    page = max(1, page)
    if before is not None:
        mode, query = "before", {**params, "before": before}
    elif after is not None:
        mode, query = "after", {**params, "after": after}
    else:
        mode, query = "offset", {**params, "offset": (page - 1) * PAGE_SIZE}
    with db.read_connection() as c:
        result = c.execute(_page_statement(where, mode), query).all()
        total = int(result[0][-1] or 0) if result else int(c.scalar(_COUNTS[where], params) or 0)
        pages = max(1, -(-total // PAGE_SIZE))
        if not result and mode == "offset" and page > pages:  # past the end: the last page
            page = pages
            query["offset"] = (page - 1) * PAGE_SIZE
            result = c.execute(_page_statement(where, mode), query).all()
    page = min(page, pages)
    rows = [TicketRow(*r[:-1]) for r in result]
    newer = rows[0].id if rows and page > 1 else None
    older = rows[-1].id if rows and page < pages else None
    return Page(rows, page, pages, total, newer, older)


def customer_tickets(
    db: Database,
    customer_id: int,
    page: int = 1,
    *,
    before: int | None = None,
    after: int | None = None,
) -> Page:
    """The customer's own tickets, newest first; ``before``/``after`` a ticket id: the
    page of older/newer tickets next to it (``page`` then only numbers it)."""
    return _rows(db, "customer", {"customer_id": customer_id}, page, before, after)


def inbox(
    db: Database,
    page: int = 1,
    status: str | None = None,
    *,
    before: int | None = None,
    after: int | None = None,
) -> Page:
    """Every ticket (staff), newest first, optionally of one status; the count comes from
    ``ticket_counts`` (no scan) and the page from an index (see :func:`customer_tickets`
    for ``before``/``after``)."""
    if status:
        return _rows(db, "status", {"status": status}, page, before, after)
    return _rows(db, "all", {}, page, before, after)


def customer_ticket(db: Database, customer_id: int, ticket_id: int) -> Ticket:
    """The customer's ticket; :class:`NotFound` if it is someone else's or missing."""
    with db.read() as s:
        ticket = s.get(Ticket, ticket_id)
        if ticket is None or ticket.customer_id != customer_id:
            raise NotFound("No such ticket on your account.")
        s.expunge(ticket)
        return ticket


def get_ticket(db: Database, ticket_id: int) -> Ticket:
    """Any ticket (staff)."""
    with db.read() as s:
        ticket = s.get(Ticket, ticket_id)
        if ticket is None:
            raise NotFound(f"There is no ticket {ticket_id}.")
        s.expunge(ticket)
        return ticket


def draft_of(db: Database, ticket_id: int) -> Draft | None:
    """The ticket's reply draft, if one exists."""
    with db.read() as s:
        draft = s.scalar(select(Draft).where(Draft.ticket_id == ticket_id))
        if draft is not None:
            s.expunge(draft)
        return draft


def save_draft(
    db: Database, ticket_id: int, body: str, author: str, *, expected_version: int | None = None
) -> int:
    """Create or replace the ticket's draft (not sent); returns its new version.
    ``expected_version``: the draft's version the editor started from (0: there was no
    draft); if it changed meanwhile, :class:`Stale` says what is there now and nothing is
    written."""
    body = clean_text(body, "reply", MAX_BODY)
    with db.write() as s:
        ticket = s.get(Ticket, ticket_id)
        if ticket is None:
            raise NotFound(f"There is no ticket {ticket_id}.")
        if ticket.replied_at is not None:
            raise Stale(
                "This ticket was already answered; its reply cannot change.",
                [f"The reply was sent {ticket.replied_at:%Y-%m-%d %H:%M} UTC."],
                current=ticket.reply or "",
                yours=body,
                back=f"/staff/tickets/{ticket_id}",
            )
        draft = s.scalar(select(Draft).where(Draft.ticket_id == ticket_id))
        seen = 0 if draft is None else draft.version
        if expected_version is not None and expected_version != seen:
            raise Stale(
                "The draft changed since you opened this ticket; your text was not saved.",
                [_draft_change(draft)],
                current=draft.body if draft else "",
                yours=body,
                back=f"/staff/tickets/{ticket_id}#draft",
            )
        if draft is None:
            s.add(Draft(ticket_id=ticket_id, body=body, author=author, version=1))
            return 1
        draft.body, draft.author, draft.updated_at = body, author, utcnow()
        draft.agent_body = None
        draft.version += 1
        return draft.version


def _draft_change(draft: Draft | None) -> str:
    if draft is None:
        return "The draft was deleted."
    return (
        f"The draft is now version {draft.version}, written by {draft.author} at "
        f"{draft.updated_at:%Y-%m-%d %H:%M} UTC."
    )


def send_reply(
    db: Database,
    ticket_id: int,
    staff_id: int,
    *,
    ticket_version: int | None = None,
    draft_version: int | None = None,
) -> None:
    """Send the ticket's draft to the customer (staff only: no tool can do this).
    ``ticket_version`` and ``draft_version``: what the sender's screen showed; if either
    changed, :class:`Stale` says what did and nothing is sent (``None``: not checked)."""
    back = f"/staff/tickets/{ticket_id}"
    with db.write_connection() as c:
        row = c.execute(_TICKET_AND_DRAFT, {"ticket_id_": ticket_id}).one_or_none()
        if row is None:
            raise NotFound(f"There is no ticket {ticket_id}.")
        status, version, replied_at, draft_id, body, d_version, d_author = row[:7]
        if replied_at is not None:
            raise Stale(
                "This ticket was already answered; nothing more was sent.",
                [f"The reply was sent {replied_at:%Y-%m-%d %H:%M} UTC."],
                back=back,
            )
        if draft_id is None:
            raise InvalidInput("There is no draft to send; write a reply first.")
        if status == "awaiting_approval":
            raise InvalidInput("A refund waits for a decision; decide it before replying.")
        if d_author == "agent" and (flagged := problems(body)):
            raise InvalidInput(f"Edit the agent's draft before sending it: {' '.join(flagged)}")
        changes = []
        if ticket_version is not None and ticket_version != version:
            changes.append(f"The ticket is now: {status.replace('_', ' ')} (it changed).")
        if draft_version is not None and draft_version != d_version:
            changes.append(f"The draft is now version {d_version}, written by {d_author}.")
        if changes:
            raise Stale(
                "This ticket changed since you opened it; nothing was sent. Read what "
                "changed, then send again.",
                changes,
                current=body,
                back=back,
            )
        now = utcnow()
        sent = c.execute(
            _SEND_DRAFT,
            {
                "draft_id_": draft_id,
                "draft_version_": d_version,
                "sent_at": now,
                "sent_by": staff_id,
            },
        ).rowcount
        answered = c.execute(
            _SEND_TICKET,
            {
                "ticket_id_": ticket_id,
                "ticket_version_": version,
                "updated_at": now,
                "reply": body,
                "replied_at": now,
                "status": "answered",
            },
        ).rowcount
        if not (sent and answered):  # changed between the read and the write (PostgreSQL)
            raise Stale("This ticket changed as you sent it; nothing was sent.", back=back)
        message_id = add_message(c, ticket_id, "staff", body, author_id=staff_id)
        email, name, subject = row[7:]
        queue_reply_to(c, ticket_id, message_id, body, email, name, subject)  # sent once
