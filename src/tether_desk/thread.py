"""A ticket's thread: the customer's messages, staff replies, agent drafts, internal notes
and events, in order, each shown only to whom it is for.

Provenance rides with every message: a customer's message is third-party content wherever
it appears (the agent reads it as data, the approver sees it flagged), a staff reply or note
is trusted staff content, an agent draft is model content. The agent reads a bounded view
(:func:`agent_view`): the latest customer message in full, the :data:`AGENT_RECENT` messages
before it cut to :data:`AGENT_EXCERPT` characters, and a count of what it left out, so its
request stays under a fixed size however long the thread grows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Connection, bindparam, delete, func, select, update

from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.errors import InvalidInput, NotFound
from tether_desk.helpdesk import HelpdeskSettings
from tether_desk.models import Customer, Draft, Message, Staff, Ticket
from tether_desk.thread_store import add_message
from tether_desk.tickets import MAX_BODY, clean_text

AGENT_RECENT = 12
"""Messages before the latest customer message that the agent reads (newest first)."""
AGENT_EXCERPT = 400
"""Characters the agent reads of each of those messages."""
SUMMARY_EVENTS = 5
"""Events (refunds approved, denied, reopenings) among the left-out messages that the
agent still reads, in full."""
LATEST_CAP = 6_000
"""Characters the agent reads of the latest customer message."""
CUSTOMER_TEXT_CAP = 8_000
"""Characters of the customer's messages given to triage and the instruction detector."""
SOURCES = {
    "customer": "written by the customer; unverified (third party)",
    "staff": "a reply sent by staff (trusted)",
    "agent": "an earlier draft written by the model (model content)",
    "note": "an internal note by staff (trusted staff content)",
    "system": "an event recorded by the desk",
}
RERUN_STATUSES = ("answered", "draft_ready", "needs_human", "failed")
"""A customer message on a ticket in one of these states sends it through triage again."""
BUSY_STATUSES = ("triaging", "awaiting_approval")
"""A customer message on a ticket in one of these states waits for the current round to
end (:func:`follow_up`): the round goes on, and the next one reads the whole thread."""
WROTE_DURING_ROUND = (
    "The customer wrote while the desk worked on the ticket; it runs again on the whole "
    "thread when the current round ends."
)
RUNS_AGAIN = "The customer wrote while the desk worked on the ticket; it runs again on the thread."

_COUNT = select(func.count(Message.id)).where(Message.ticket_id == bindparam("ticket_id_"))
_LATEST = (  # and how many messages the thread has, in the same statement
    select(Message.id, Message.kind, Message.body, Message.created_at, _COUNT.scalar_subquery())
    .where(Message.ticket_id == bindparam("ticket_id_"))
    .order_by(Message.id.desc())
    .limit(AGENT_RECENT + 1)
)
_CUSTOMER = (
    select(Message.id, Message.body, Message.created_at)
    .where(Message.ticket_id == bindparam("ticket_id_"), Message.kind == "customer")
    .order_by(Message.id.desc())
    .limit(50)
)


@dataclass(frozen=True, slots=True)
class ThreadMessage:
    """One message as a page shows it."""

    id: int
    kind: str
    author: str
    body: str
    public: bool
    created_at: datetime

    @property
    def source(self) -> str:
        """Where the message comes from, in words."""
        return SOURCES.get(self.kind, self.kind)


def thread(db: Database, ticket_id: int, *, staff: bool) -> list[ThreadMessage]:
    """The ticket's messages in order: all of them for staff, the public ones for the
    customer (never a note or an agent draft)."""
    query = select(Message).where(Message.ticket_id == ticket_id).order_by(Message.id)
    if not staff:
        query = query.where(Message.public.is_(True))
    with db.read() as s:
        rows = s.scalars(query).all()
        ticket = s.get(Ticket, ticket_id)
        customer = s.get(Customer, ticket.customer_id) if ticket else None
        ids = {r.author_id for r in rows if r.kind != "customer" and r.author_id is not None}
        names = dict(s.execute(select(Staff.id, Staff.name).where(Staff.id.in_(ids))).all())
    out = []
    for r in rows:
        if r.kind == "customer":
            author = customer.name if customer else "customer"
        elif r.kind == "agent":
            author = "agent"
        else:
            author = names.get(r.author_id, "desk") if r.author_id is not None else "desk"
        out.append(ThreadMessage(r.id, r.kind, author, r.body, r.public, r.created_at))
    return out


def customer_messages(connection: Connection, ticket_id: int) -> list[tuple[int, str, datetime]]:
    """The customer's latest messages (id, text, time), oldest first, at most
    :data:`CUSTOMER_TEXT_CAP` characters together (the newest are kept)."""
    return newest_within_cap(connection.execute(_CUSTOMER, {"ticket_id_": ticket_id}).all())


def newest_within_cap(rows: Sequence[Any]) -> list[tuple[int, str, datetime]]:
    """Of the customer's messages ``rows`` (id, text, time), newest first, those kept by
    :func:`customer_messages`, oldest first."""
    kept: list[tuple[int, str, datetime]] = []
    size = 0
    for message_id, body, created_at in rows:
        if kept and size + len(body) > CUSTOMER_TEXT_CAP:
            break
        kept.append((int(message_id), str(body), created_at))
        size += len(body)
    return kept[::-1]


def customer_text(connection: Connection, ticket_id: int) -> str:
    """The customer's messages as one text (triage, the instruction detector), each after a
    line naming it when there are several."""
    return joined_text(customer_messages(connection, ticket_id))


def joined_text(messages: Sequence[tuple[int, str, datetime]]) -> str:
    """:func:`customer_text` of the messages :func:`customer_messages` returned."""
    if len(messages) == 1:
        return messages[0][1]
    return "\n\n".join(f"[message #{i}, {t:%Y-%m-%d %H:%M}]\n{b}" for i, b, t in messages)


def _cut(text: str, cap: int) -> str:
    return text if len(text) <= cap else f"{text[:cap]} [{len(text) - cap} characters omitted]"


def agent_view(connection: Connection, ticket_id: int) -> dict[str, Any]:
    """What the agent reads of the thread: the latest customer message (cut at
    :data:`LATEST_CAP`), the messages before it (the newest :data:`AGENT_RECENT`, each cut
    at :data:`AGENT_EXCERPT`, each with its source), what was left out or cut (in words:
    the run's trace shows it beside the tool's result), and a summary of what was left
    out (how many of each kind, and its latest events in full)."""
    params = {"ticket_id_": ticket_id}
    recent = connection.execute(_LATEST, params).all()
    total = int(recent[0][-1] or 0) if recent else 0
    latest = next((r for r in recent if r.kind == "customer"), None)
    if latest is None:
        found = customer_messages(connection, ticket_id)
        latest_row = found[-1] if found else (0, "", utcnow())
    else:
        latest_row = (latest.id, latest.body, latest.created_at)
    earlier = [r for r in reversed(recent) if r.id != latest_row[0]][-AGENT_RECENT:]
    shown = len(earlier) + 1
    cut = sum(len(r.body) > AGENT_EXCERPT for r in earlier)
    trimmed = [f"{total - shown} older message(s) left out; the newest are shown"] * (total > shown)
    if cut:
        trimmed.append(f"{cut} shown cut to {AGENT_EXCERPT} characters")
    if len(latest_row[1]) > LATEST_CAP:
        trimmed.append(f"the latest cut to {LATEST_CAP:,} characters")
    summary = ""
    if total > shown and earlier:
        summary = _summary(connection, ticket_id, min(r.id for r in earlier))
    return {
        "latest": {
            "message": latest_row[0],
            "text": _cut(latest_row[1], LATEST_CAP),
            "source": f"message #{latest_row[0]}, {SOURCES['customer']}",
        },
        "earlier": [
            {
                "message": r.id,
                "from": r.kind,
                "source": SOURCES.get(r.kind, r.kind),
                "text": _cut(r.body, AGENT_EXCERPT),
            }
            for r in earlier
        ],
        "left_out": "; ".join(trimmed),
        "summary": summary,
    }


_OLDER_KINDS = (
    select(Message.kind, func.count())
    .where(Message.ticket_id == bindparam("ticket_id_"), Message.id < bindparam("before_"))
    .group_by(Message.kind)
)
_OLDER_EVENTS = (
    select(Message.body)
    .where(
        Message.ticket_id == bindparam("ticket_id_"),
        Message.id < bindparam("before_"),
        Message.kind == "system",
    )
    .order_by(Message.id.desc())
    .limit(SUMMARY_EVENTS)
)
_KIND_WORDS = {
    "customer": "from the customer",
    "staff": "staff replies",
    "note": "internal notes",
    "agent": "earlier drafts",
    "system": "event(s)",
}


def _summary(connection: Connection, ticket_id: int, before: int) -> str:
    """What the messages before ``before`` were, in one line: how many of each kind, and
    the newest :data:`SUMMARY_EVENTS` events in full (refunds approved or denied: facts)."""
    params = {"ticket_id_": ticket_id, "before_": before}
    counts = dict(connection.execute(_OLDER_KINDS, params).all())
    if not counts:
        return ""
    parts = [f"{counts[k]} {w}" for k, w in _KIND_WORDS.items() if counts.get(k)]
    line = f"Those left out: {', '.join(parts)}."
    events = [str(b) for b in connection.execute(_OLDER_EVENTS, params).scalars()][::-1]
    if events:
        line += f" Latest events among them: {' '.join(_cut(e, 200) for e in events)}"
    return line


def customer_reply(
    db: Database,
    customer_id: int,
    ticket_id: int,
    body: str,
    settings: HelpdeskSettings | None = None,
) -> bool:
    """Add the customer's message to their ticket; True if it goes through triage and the
    agent again now (an answered ticket reopens within ``settings.reopen_window``). On a
    ticket the desk is working on (:data:`BUSY_STATUSES`: being triaged, or a refund
    waiting for approval) the message is recorded and nothing is interrupted: the round
    goes on (the approval screen shows the message), and when it ends :func:`follow_up`
    starts the next one on the whole thread. The ticket's row is locked first, so a round
    that ends at the same moment either sees the message or lets this call rerun it."""
    window = (settings or HelpdeskSettings()).reopen_window
    body = clean_text(body, "message", MAX_BODY)
    with db.write_connection() as c:
        row = c.execute(
            select(Ticket.customer_id, Ticket.status, Ticket.replied_at)
            .where(Ticket.id == ticket_id)
            .with_for_update()
        ).one_or_none()
        if row is None or row.customer_id != customer_id:
            raise NotFound("No such ticket on your account.")
        closed = row.status == "answered" and row.replied_at is not None
        if closed and utcnow() - row.replied_at > window:
            raise InvalidInput(
                f"This ticket was answered more than {window.days} day(s) ago; open a new ticket."
            )
        add_message(c, ticket_id, "customer", body, author_id=customer_id)
        if row.status in BUSY_STATUSES:
            add_message(c, ticket_id, "system", WROTE_DURING_ROUND, public=False)
        if row.status not in RERUN_STATUSES:
            return False
        if row.status == "answered":
            add_message(c, ticket_id, "system", "The customer reopened the ticket.")
        _next_round(c, ticket_id)
    return True


def _next_round(c: Connection, ticket_id: int) -> None:
    c.execute(delete(Draft).where(Draft.ticket_id == ticket_id))  # kept in the thread
    c.execute(
        update(Ticket)
        .where(Ticket.id == ticket_id)
        .values(status="new", reply=None, replied_at=None, round=Ticket.round + 1)
        .values(version=Ticket.version + 1)
        .values(updated_at=utcnow())
    )


_ANSWERED_UP_TO = (
    select(func.coalesce(func.max(Message.id), 0))
    .where(
        Message.ticket_id == bindparam("ticket_id_"),
        Message.kind == "staff",
        Message.author_id.is_not(None),  # a person's reply, not the desk's own answer
    )
    .scalar_subquery()
)
_UNREAD = (
    select(Message.id)
    .where(
        Message.ticket_id == bindparam("ticket_id_"),
        Message.kind == "customer",
        Message.id > bindparam("seen_"),
        Message.id > _ANSWERED_UP_TO,
    )
    .limit(1)
)
_ROUND_ENDED = select(Ticket.id).where(
    Ticket.id == bindparam("ticket_id_"),
    Ticket.round == bindparam("round_"),
    Ticket.status.in_(RERUN_STATUSES),
)


def follow_up(db: Database, scope: RoundScope) -> bool:
    """After a round of the ticket ended (a draft, an answer, a person, a failure): if the
    customer wrote since the round read the thread (a message newer than ``scope.seen``,
    and than any reply a person sent: they answered it), start the next round now, on the
    whole thread; True if it did. Nothing happens if the
    ticket is not resting where this round left it (``scope.round`` moved on: the
    customer's reply already reran it), so a round is followed up once, whenever this
    runs again (a durable step replayed)."""
    if scope.seen is None:
        return False
    params = {"ticket_id_": scope.ticket_id, "round_": scope.round, "seen_": scope.seen}
    with db.read_connection() as c:  # the usual case (nobody wrote) takes no write lock
        if c.execute(_UNREAD, params).first() is None:
            return False
    with db.write_connection() as c:
        resting = c.execute(_ROUND_ENDED.with_for_update(), params).first()
        if resting is None or c.execute(_UNREAD, params).first() is None:
            return False
        add_message(c, scope.ticket_id, "system", RUNS_AGAIN, public=False)
        _next_round(c, scope.ticket_id)
    return True


class RoundScope(Protocol):
    """What :func:`follow_up` reads of a round (a :class:`~tether_desk.agent.TicketScope`)."""

    @property
    def ticket_id(self) -> int: ...
    @property
    def seen(self) -> int | None: ...
    @property
    def round(self) -> int: ...


def add_note(db: Database, ticket_id: int, staff_id: int, body: str) -> int:
    """An internal note on the ticket: staff only, never shown to the customer."""
    body = clean_text(body, "note", MAX_BODY)
    with db.write_connection() as c:
        if c.scalar(select(Ticket.id).where(Ticket.id == ticket_id)) is None:
            raise NotFound(f"There is no ticket {ticket_id}.")
        return add_message(c, ticket_id, "note", body, author_id=staff_id, public=False)
