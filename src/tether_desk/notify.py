"""E-mail notifications through an outbox: the customer when staff reply, every staff
member when a refund waits for approval.

A notification is a row of ``notifications`` written in the same transaction as the event
it tells of (the reply sent, the approval stored), under a unique key: the event and its
e-mail are committed together or not at all, and an event recorded twice (a durable step
run again) queues one e-mail. :class:`Outbox` sends what is due through a
:class:`Mailer` (:class:`SmtpMailer`: the standard library's ``smtplib``; or
:class:`PrintMailer`), claiming each row first so that two processes never send the same
one, and marking it sent afterwards. A process killed after the commit and before sending
loses nothing: the next start sends it, once. Killed during the SMTP exchange itself, the
row is sent again after :data:`CLAIM_SECONDS` with the same ``Message-ID``, which
receivers use to drop the duplicate. The agent has no tool that reaches any of this.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import smtplib
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from email.message import EmailMessage
from typing import Any, Protocol, TextIO

from sqlalchemy import (
    Connection,
    DateTime,
    Executable,
    String,
    bindparam,
    cast,
    literal,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.models import Customer, Notification, Order, Staff, Ticket
from tether_desk.money import format_cents

log = logging.getLogger("tether_desk")
CLAIM_SECONDS = 60
"""How long a claimed notification is left to the process that claimed it."""
MAX_ATTEMPTS = 8
SENDER = "support@desk.example"


class Mailer(Protocol):
    """Sends one e-mail (blocking; the outbox calls it in a thread)."""

    def send(self, message: EmailMessage) -> None:
        """Send ``message`` or raise."""


@dataclass(frozen=True, slots=True)
class SmtpMailer:
    """Sends through an SMTP server (``smtplib``), one connection per e-mail."""

    host: str = "127.0.0.1"
    port: int = 25
    timeout: float = 10.0

    def send(self, message: EmailMessage) -> None:
        with smtplib.SMTP(self.host, self.port, timeout=self.timeout) as smtp:
            smtp.send_message(message)


@dataclass(slots=True)
class PrintMailer:
    """Prints each e-mail instead of sending it (``tether serve --print-mail``)."""

    stream: TextIO = field(default_factory=lambda: sys.stdout)

    def send(self, message: EmailMessage) -> None:
        print(f"--- e-mail to {message['To']}: {message['Subject']}", file=self.stream)
        print(message.get_content().rstrip(), file=self.stream, flush=True)


_COLUMNS = ["key", "to_addr", "subject", "body", "created_at", "attempts", "last_error"]
_STATEMENTS: dict[tuple[str, str], Executable] = {}
"""Built once per dialect: ``one`` (a notification), ``staff`` (one per staff member)."""


def _statement(connection: Connection, which: str) -> Executable:
    key = (connection.dialect.name, which)
    found = _STATEMENTS.get(key)
    if found is None:
        found = _STATEMENTS[key] = _build(connection.dialect.name, which)
    return found


def _build(dialect: str, which: str) -> Executable:
    make = postgresql.insert if dialect == "postgresql" else sqlite.insert
    if which == "one":
        values: dict[str, Any] = {c: bindparam(c) for c in _COLUMNS[:5]}
        statement = make(Notification).values(**values, attempts=0, last_error="")
    else:  # every staff member, in one statement
        key = bindparam("key_prefix", type_=String) + cast(Staff.id, String)
        rows = select(
            key,
            Staff.email,
            bindparam("subject", type_=String),
            bindparam("body", type_=String),
            bindparam("created_at", type_=DateTime()),
            literal(0),
            literal(""),
        ).where(true())  # SQLite: INSERT ... SELECT ... ON CONFLICT needs a WHERE
        statement = make(Notification).from_select(_COLUMNS, rows)
    return statement.on_conflict_do_nothing(index_elements=["key"])


def _insert(connection: Connection, key: str, to: str, subject: str, body: str) -> None:
    values = {"key": key, "to_addr": to, "subject": subject[:200], "body": body}
    connection.execute(_statement(connection, "one"), {**values, "created_at": utcnow()})


_REPLY_TO = (
    select(Customer.email, Customer.name, Ticket.subject)
    .join(Ticket, Ticket.customer_id == Customer.id)
    .where(Ticket.id == bindparam("ticket_id"))
)
_ORDER_NUMBER = (
    select(Order.number)
    .join(Ticket, Ticket.order_id == Order.id)
    .where(Ticket.id == bindparam("ticket_id"))
)


def queue_reply(connection: Connection, ticket_id: int, message_id: int, body: str) -> None:
    """Queue the e-mail telling the customer of staff's reply ``message_id``."""
    row = connection.execute(_REPLY_TO, {"ticket_id": ticket_id}).one()
    queue_reply_to(connection, ticket_id, message_id, body, row.email, row.name, row.subject)


def queue_reply_to(
    connection: Connection,
    ticket_id: int,
    message_id: int,
    body: str,
    email: str,
    name: str,
    subject: str,
) -> None:
    """:func:`queue_reply` for a caller that already read the customer's ``email`` and
    ``name`` and the ticket's ``subject`` (one statement)."""
    text = f"Bonjour {name},\n\n{body}\n\nRepondez depuis votre ticket #{ticket_id}."
    _insert(connection, f"reply:{message_id}", email, f"Re: {subject}", text)


def queue_approval(
    connection: Connection,
    approval_id: int,
    ticket_id: int,
    cents: int,
    *,
    order_number: str | None = None,
) -> None:
    """Queue, for every staff member, the e-mail saying a refund waits for approval (one
    statement when the caller gives the ticket's ``order_number``)."""
    if order_number is None:
        order_number = connection.scalar(_ORDER_NUMBER, {"ticket_id": ticket_id})
    subject = f"Refund of {format_cents(cents)} EUR waits for approval (order {order_number})"
    body = f"{subject}.\nDecide it at /staff/approvals/{approval_id}."
    connection.execute(
        _statement(connection, "staff"),
        {
            "key_prefix": f"approval:{approval_id}:",
            "subject": subject[:200],
            "body": body,
            "created_at": utcnow(),
        },
    )


_CLAIM = (
    update(Notification)
    .where(
        Notification.id == bindparam("id_"),
        Notification.sent_at.is_(None),
        or_(Notification.claimed_at.is_(None), Notification.claimed_at < bindparam("stale_")),
    )
    .values(claimed_at=bindparam("now_"), attempts=Notification.attempts + 1)
)


class Outbox:
    """Sends the queued notifications through ``mailer`` (see the module doc)."""

    def __init__(self, db: Database, mailer: Mailer, *, sender: str = SENDER) -> None:
        self.db = db
        self.mailer = mailer
        self.sender = sender
        self._wake = asyncio.Event()

    def kick(self) -> None:
        """Look for notifications now (from the event loop's thread)."""
        self._wake.set()

    def _due(self) -> list[Notification]:
        stale = utcnow() - timedelta(seconds=CLAIM_SECONDS)
        with self.db.read() as s:
            rows = s.scalars(
                select(Notification)
                .where(
                    Notification.sent_at.is_(None),
                    Notification.attempts < MAX_ATTEMPTS,
                    or_(Notification.claimed_at.is_(None), Notification.claimed_at < stale),
                )
                .order_by(Notification.id)
                .limit(50)
            ).all()
            for r in rows:
                s.expunge(r)
            return list(rows)

    def _claim(self, row: Notification) -> bool:
        now = utcnow()
        stale = now - timedelta(seconds=CLAIM_SECONDS)
        with self.db.write_connection() as c:
            return bool(c.execute(_CLAIM, {"id_": row.id, "stale_": stale, "now_": now}).rowcount)

    def _finish(self, row: Notification, error: str = "") -> None:
        with self.db.write_connection() as c:
            values = {"last_error": error, "claimed_at": None} if error else {"sent_at": utcnow()}
            c.execute(update(Notification).where(Notification.id == row.id).values(**values))

    def _message(self, row: Notification) -> EmailMessage:
        message = EmailMessage()
        message["From"] = self.sender
        message["To"] = row.to_addr
        message["Subject"] = row.subject
        message["Message-ID"] = f"<{row.key.replace(':', '.')}@tether-desk>"
        message.set_content(row.body)
        return message

    async def deliver(self) -> int:
        """Send every due notification once; returns how many were sent."""
        sent = 0
        for row in await asyncio.to_thread(self._due):
            if not await asyncio.to_thread(self._claim, row):
                continue  # another process has it
            try:
                await asyncio.to_thread(self.mailer.send, self._message(row))
            except (OSError, smtplib.SMTPException) as exc:
                log.warning("notification %s not sent: %s", row.key, exc)
                await asyncio.to_thread(self._finish, row, f"{type(exc).__name__}: {exc}")
                continue
            await asyncio.to_thread(self._finish, row)
            sent += 1
        return sent

    async def run(self, poll_seconds: float = 2.0) -> None:
        """Deliver until cancelled, every ``poll_seconds`` or when kicked."""
        while True:
            try:
                await self.deliver()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the outbox failed; retrying")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll_seconds):
                    await self._wake.wait()


def start_outbox(desk: HasMailer, poll_seconds: float = 2.0) -> asyncio.Task[None] | None:
    """Run an :class:`Outbox` for ``desk`` on the running loop (``None`` without a mailer)."""
    if desk.mailer is None:
        return None
    outbox = Outbox(desk.db, desk.mailer)
    return asyncio.create_task(outbox.run(poll_seconds), name="desk-outbox")


class HasMailer(Protocol):
    """What :func:`start_outbox` needs of a desk."""

    db: Database
    mailer: Mailer | None
