"""E-mail notifications through an outbox: the customer when staff reply, every staff
member when a refund waits for approval.

A notification is a row of ``notifications`` written in the same transaction as the event
it tells of (the reply sent, the approval stored; on the durable desk, inside the step
that records it), under a unique key: the event and its e-mail are committed together or
not at all, and an event recorded twice (a durable step run again) queues one e-mail.
:class:`Outbox` sends what is due through a :class:`Mailer` (:class:`SmtpMailer`: the
standard library's ``smtplib``; or :class:`PrintMailer`).

What "never sends twice, never loses one" means with SMTP, exactly:

* **Never lost.** A row is marked sent only after the server accepted the message (its
  ``250`` to the end of the data). A process killed at any point before that (after the
  commit, before or inside the SMTP exchange) leaves the row unsent, and it is sent at
  the next start, or by another process once the claim's lease (:data:`CLAIM_SECONDS`)
  has run out. A refusal or an unreachable server is retried with a growing delay, up to
  :data:`MAX_ATTEMPTS` times (about two hours); a row given up on stays in the table with
  its last error and is counted in the metrics (``desk_notifications{state="given_up"}``).
* **Sent once, except in one window SMTP cannot close.** Two processes never send the
  same row: each claims it first (one conditional update), and a process never starts
  handing the message over once less than three of its mailer's ``timeout`` remain of its
  lease (the reply to ``DATA``, the data, the reply to its end), so it is done, one way
  or the other, before another process may take the row over. The one
  window: the server has accepted the message and the process dies (or loses the server's
  reply, or cannot write to the database) before it records that. SMTP has no two-phase
  commit, so no client can close it; here it lasts one local write: the row is marked sent
  as soon as the ``250`` arrives, before ``QUIT``. An e-mail sent again after that window
  carries the same ``Message-ID`` (from the row's key), which mail servers and clients use
  to drop the duplicate.

The agent has no tool that reaches any of this.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import smtplib
import sys
import threading
import time
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

from tether.errors import ConfigError
from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.models import Customer, Notification, Order, Staff, Ticket
from tether_desk.money import format_cents

log = logging.getLogger("tether_desk")
CLAIM_SECONDS = 60
"""How long a claimed notification is left to the process that claimed it (its lease)."""
MAX_ATTEMPTS = 12
"""Attempts before a notification is given up on (left unsent, with its last error)."""
RETRY_SECONDS = 5
"""The delay after a first failed attempt; it doubles with each, up to :data:`RETRY_CAP`."""
RETRY_CAP = 1_800
SENDER = "support@desk.example"


class LeaseTooShort(smtplib.SMTPException):
    """Too little of the claim's lease remains to finish the exchange: nothing was sent."""


class Mailer(Protocol):
    """Sends e-mails (blocking; the outbox calls it in a thread)."""

    def send(self, message: EmailMessage, deadline: float) -> None:
        """Send ``message`` or raise; return once the server has accepted it. Never start
        handing it over (the end of the data) unless the answer can come before
        ``deadline`` (a :func:`time.monotonic` value): raise :class:`LeaseTooShort`."""

    def close(self) -> None:
        """End the connection, if one is open (after each batch)."""


@dataclass(slots=True)
class SmtpMailer:
    """Sends through an SMTP server (``smtplib``), one connection per batch. ``timeout``
    bounds each exchange with the server (connecting, each command, each reply)."""

    host: str = "127.0.0.1"
    port: int = 25
    timeout: float = 10.0
    _smtp: smtplib.SMTP | None = field(default=None, init=False, repr=False, compare=False)
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    def send(self, message: EmailMessage, deadline: float) -> None:
        with self._lock:
            try:
                self._send(message, deadline)
            except BaseException:
                self._drop()  # a failed exchange leaves the connection in doubt
                raise

    def _send(self, message: EmailMessage, deadline: float) -> None:
        if self._smtp is None:
            self._smtp = smtplib.SMTP(self.host, self.port, timeout=self.timeout)
        smtp = self._smtp
        sender, to = str(message["From"]), str(message["To"])
        smtp.ehlo_or_helo_if_needed()
        code, reply = smtp.mail(sender)
        if code != 250:
            raise smtplib.SMTPSenderRefused(code, reply, sender)
        code, reply = smtp.rcpt(to)
        if code not in (250, 251):
            raise smtplib.SMTPRecipientsRefused({to: (code, reply)})
        # what is left: the reply to DATA, sending the data, the reply to its end
        if time.monotonic() + 3 * self.timeout > deadline:
            raise LeaseTooShort("too little of the claim's lease is left; sent later")
        code, reply = smtp.data(message.as_bytes())  # the server's answer: accepted or not
        if code != 250:
            raise smtplib.SMTPDataError(code, reply)

    def close(self) -> None:
        with self._lock:
            if self._smtp is not None:
                with contextlib.suppress(OSError, smtplib.SMTPException):
                    self._smtp.quit()
                self._drop()

    def _drop(self) -> None:
        smtp, self._smtp = self._smtp, None
        if smtp is not None:
            smtp.close()


@dataclass(slots=True)
class PrintMailer:
    """Prints each e-mail instead of sending it (``tether serve --print-mail``)."""

    stream: TextIO = field(default_factory=lambda: sys.stdout)

    def send(self, message: EmailMessage, deadline: float) -> None:
        print(f"--- e-mail to {message['To']}: {message['Subject']}", file=self.stream)
        print(message.get_content().rstrip(), file=self.stream, flush=True)

    def close(self) -> None:
        pass


def mailer_spec(mailer: Mailer | None) -> str:
    """``mailer`` as text another process rebuilds with :func:`mailer_of` (``print``,
    ``smtp:HOST:PORT``; empty for none)."""
    if mailer is None:
        return ""
    if isinstance(mailer, PrintMailer):
        return "print"
    if isinstance(mailer, SmtpMailer):
        return f"smtp:{mailer.host}:{mailer.port}:{mailer.timeout}"
    raise ConfigError(f"a {type(mailer).__name__} cannot be handed to worker processes")


def mailer_of(spec: str) -> Mailer | None:
    """The mailer :func:`mailer_spec` wrote as ``spec``."""
    if not spec:
        return None
    if spec == "print":
        return PrintMailer()
    kind, _, rest = spec.partition(":")
    host, port, timeout = rest.rsplit(":", 2) if kind == "smtp" else ("", "", "")
    if not host or not port.isdigit():
        raise ConfigError(f"{spec!r} names no mailer; write print or smtp:HOST:PORT:TIMEOUT")
    return SmtpMailer(host, int(port), float(timeout))


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


def retry_delay(attempts: int, first: float = RETRY_SECONDS) -> float:
    """Seconds before a notification that failed ``attempts`` times is tried again."""
    return float(min(first * 2 ** max(attempts - 1, 0), RETRY_CAP))


class Outbox:
    """Sends the queued notifications through ``mailer`` (see the module doc).
    ``lease``: seconds a claim is left to this process; ``retry_seconds``: the delay after
    a first failure (tests shorten both)."""

    def __init__(
        self,
        db: Database,
        mailer: Mailer,
        *,
        sender: str = SENDER,
        lease: float = CLAIM_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self.db = db
        self.mailer = mailer
        self.sender = sender
        self.lease = lease
        self.retry_seconds = retry_seconds
        self._wake = asyncio.Event()

    def kick(self) -> None:
        """Look for notifications now (from the event loop's thread)."""
        self._wake.set()

    def _due(self) -> list[Notification]:
        stale = utcnow() - timedelta(seconds=self.lease)
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

    def _claim(self, row: Notification) -> float | None:
        """Claim ``row``; the :func:`time.monotonic` deadline of the lease, or ``None``
        if another process holds it."""
        started = time.monotonic()
        now = utcnow()
        stale = now - timedelta(seconds=self.lease)
        with self.db.write_connection() as c:
            won = c.execute(_CLAIM, {"id_": row.id, "stale_": stale, "now_": now}).rowcount
        return started + self.lease if won else None

    def _sent(self, row: Notification) -> None:
        with self.db.write_connection() as c:
            c.execute(
                update(Notification).where(Notification.id == row.id).values(sent_at=utcnow())
            )

    def _failed(self, row: Notification, error: str) -> None:
        """Keep ``row`` for a later attempt: its claim now holds it for the retry delay."""
        until = utcnow() - timedelta(
            seconds=self.lease - retry_delay(row.attempts + 1, self.retry_seconds)
        )
        values = {"last_error": error[:1000], "claimed_at": until}
        with self.db.write_connection() as c:
            c.execute(update(Notification).where(Notification.id == row.id).values(**values))

    def _message(self, row: Notification) -> EmailMessage:
        message = EmailMessage()
        message["From"] = self.sender
        message["To"] = row.to_addr
        message["Subject"] = row.subject
        message["Message-ID"] = message_id(row.key)
        message.set_content(row.body)
        return message

    async def deliver(self) -> int:
        """Send every due notification once; returns how many were sent."""
        sent = 0
        try:
            for row in await asyncio.to_thread(self._due):
                deadline = await asyncio.to_thread(self._claim, row)
                if deadline is None:
                    continue  # another process has it
                try:
                    await asyncio.to_thread(self.mailer.send, self._message(row), deadline)
                except (OSError, smtplib.SMTPException) as exc:
                    log.warning("notification %s not sent: %s", row.key, exc)
                    await asyncio.to_thread(self._failed, row, f"{type(exc).__name__}: {exc}")
                    continue
                await asyncio.to_thread(self._sent, row)  # at once: before QUIT
                sent += 1
        finally:
            await asyncio.to_thread(self.mailer.close)
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


def message_id(key: str) -> str:
    """The ``Message-ID`` of the notification ``key``: the same at every attempt."""
    return f"<{key.replace(':', '.')}@tether-desk>"


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
