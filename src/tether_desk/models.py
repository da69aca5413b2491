"""The desk's tables (SQLAlchemy 2 declarative): accounts, orders, tickets, the refund
ledger, approvals, reply drafts and the trace of every run.

Money is stored in integer cents (no float rounding). Times are naive UTC. An order's
address and payment method are columns here, and no tool, page or API ever selects them:
the services that read orders name their columns explicitly.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from tether_desk.clock import utcnow

TICKET_STATUSES = (
    "new",  # waiting for the pipeline
    "triaging",  # the pipeline has claimed it
    "answered",  # a reply was sent to the customer
    "awaiting_approval",  # a refund proposal waits for staff
    "draft_ready",  # a reply draft waits for staff to edit and send
    "needs_human",  # triaged "other": a person handles it
    "failed",  # the pipeline could not finish; a person handles it
)
CATEGORIES = ("tracking", "refund", "other")


class Base(DeclarativeBase):
    """Declarative base of the desk's tables."""


class Customer(Base):
    """A customer who logs in and opens tickets on their own orders."""

    __tablename__ = "customers"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    email: Mapped[str] = mapped_column(String(254), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    password_hash: Mapped[str] = mapped_column(String(255))


class Staff(Base):
    """A support agent: reads the inbox, approves or denies, edits and sends replies."""

    __tablename__ = "staff"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    email: Mapped[str] = mapped_column(String(254), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    password_hash: Mapped[str] = mapped_column(String(255))


class Order(Base):
    """An order. ``shipping_address`` and ``payment_method`` are never read by a tool."""

    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    number: Mapped[str] = mapped_column(String(16), unique=True)
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id"), index=True)
    status: Mapped[str] = mapped_column(String(32))
    amount_paid_cents: Mapped[int] = mapped_column(Integer)
    currency: Mapped[str] = mapped_column(String(3), default="EUR")
    shipping_address: Mapped[str] = mapped_column(Text)
    payment_method: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Ticket(Base):
    """A ticket, opened by an authenticated customer on one of their orders."""

    __tablename__ = "tickets"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id"))
    order_id: Mapped[int] = mapped_column(ForeignKey("orders.id"), index=True)
    subject: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(32), default="new")
    category: Mapped[str | None] = mapped_column(String(16), default=None)
    reply: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, index=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    replied_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    assignee_id: Mapped[int | None] = mapped_column(
        ForeignKey("staff.id"), default=None, index=True
    )
    """The staff member the ticket is assigned to (``None``: unassigned)."""
    round: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """How many times a customer's message sent the ticket through the pipeline again."""
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    """Grows on every change of the ticket: a transition states the version it expects."""
    __table_args__ = (
        Index("ix_tickets_status_id", "status", "id"),
        Index("ix_tickets_customer_id_id", "customer_id", "id"),
    )


class TicketCount(Base):
    """How many tickets have each status, kept exact by triggers on ``tickets`` (migration
    0002): the inbox's count without a scan."""

    __tablename__ = "ticket_counts"
    status: Mapped[str] = mapped_column(String(32), primary_key=True)
    n: Mapped[int] = mapped_column(Integer)


class Refund(Base):
    """One row per refund; the idempotency key makes a replayed call a no-op."""

    __tablename__ = "refunds"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    order_id: Mapped[int] = mapped_column(ForeignKey("orders.id"), index=True)
    amount_cents: Mapped[int] = mapped_column(Integer)
    idempotency_key: Mapped[str] = mapped_column(String(200), unique=True)
    ticket_id: Mapped[int | None] = mapped_column(ForeignKey("tickets.id"), default=None)
    approved_by: Mapped[int | None] = mapped_column(ForeignKey("staff.id"), default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Approval(Base):
    """A deferred tool call waiting for staff; its run state is in the runtime's state store
    (``tether.state_store.SqlStateStore``, same database) under ``run_id``/``state_version``.

    At most one pending approval per ticket (a partial unique index). ``status`` moves
    once from ``pending`` to ``approved``/``denied``/``expired`` with a conditional
    update: the first decision wins, so a state is resumed once.
    """

    __tablename__ = "approvals"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ticket_id: Mapped[int] = mapped_column(ForeignKey("tickets.id"), index=True)
    run_id: Mapped[str] = mapped_column(String(64), index=True)
    call_id: Mapped[str] = mapped_column(String(128))
    tool: Mapped[str] = mapped_column(String(64))
    arguments: Mapped[dict[str, object]] = mapped_column(JSON)
    arguments_hash: Mapped[str] = mapped_column(String(64))
    amount_cents: Mapped[int] = mapped_column(Integer)
    context: Mapped[dict[str, object]] = mapped_column(JSON)
    state_version: Mapped[int] = mapped_column(Integer)
    """The version of the run state waiting in the runtime's state store."""
    status: Mapped[str] = mapped_column(String(16), default="pending", index=True)
    typed_amount_required: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime)
    decided_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    decided_by: Mapped[int | None] = mapped_column(ForeignKey("staff.id"), default=None)
    reason: Mapped[str] = mapped_column(Text, default="")
    approved_cents: Mapped[int | None] = mapped_column(Integer, default=None)
    """The amount staff approved when lower than ``amount_cents`` (``None``: as proposed)."""
    __table_args__ = (
        Index(
            "one_pending_approval_per_ticket",
            "ticket_id",
            unique=True,
            sqlite_where=text("status = 'pending'"),
            postgresql_where=text("status = 'pending'"),
        ),
    )


class Draft(Base):
    """The reply the agent wrote; staff edit it and send it (the agent cannot send)."""

    __tablename__ = "drafts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ticket_id: Mapped[int] = mapped_column(ForeignKey("tickets.id"), unique=True)
    body: Mapped[str] = mapped_column(Text)
    author: Mapped[str] = mapped_column(String(32))  # "agent", "desk" or "staff"
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    sent_by: Mapped[int | None] = mapped_column(ForeignKey("staff.id"), default=None)
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    """Grows on every change of the draft: sending states the version staff saw."""
    agent_body: Mapped[str | None] = mapped_column(Text, default=None)
    """The agent's latest text when staff wrote the draft (the agent never replaces it)."""


class Run(Base):
    """One model run (triage or refund agent): outcome and tokens."""

    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    ticket_id: Mapped[int] = mapped_column(ForeignKey("tickets.id"), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # "triage" | "refund"
    status: Mapped[str] = mapped_column(String(32), default="running")
    outcome_reason: Mapped[str] = mapped_column(Text, default="")
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    requests: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)


class RunEvent(Base):
    """One event of a run's trace, in order (``seq``), JSON-ready."""

    __tablename__ = "run_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"))
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    data: Mapped[dict[str, object]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    __table_args__ = (UniqueConstraint("run_id", "seq"),)


MESSAGE_KINDS = (
    "customer",  # written by the customer: third-party content
    "staff",  # a reply sent to the customer by staff (or by the desk's own code)
    "agent",  # a draft the agent wrote: model content, staff only
    "note",  # an internal note: trusted staff content, never shown to the customer
    "system",  # an event of the ticket ("refund of 30.00 EUR approved by Camille")
)


class Message(Base):
    """One message of a ticket's thread, in order (``id``). ``public``: the customer sees
    it. A ticket's first message is written by a trigger on ``tickets`` (migration 0005)."""

    __tablename__ = "messages"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    ticket_id: Mapped[int] = mapped_column(ForeignKey("tickets.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))
    author_id: Mapped[int | None] = mapped_column(Integer, default=None)
    """The customer's or staff member's id (by ``kind``); ``None`` for the agent and desk."""
    body: Mapped[str] = mapped_column(Text)
    public: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    __table_args__ = (Index("ix_messages_ticket_id_id", "ticket_id", "id"),)


class SavedReply(Base):
    """A reply staff reuse; ``{customer}``, ``{order}``, ``{paid}``, ``{refunded}``,
    ``{remaining}`` and ``{status}`` are filled from the ticket's order."""

    __tablename__ = "saved_replies"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    title: Mapped[str] = mapped_column(String(100), unique=True)
    body: Mapped[str] = mapped_column(Text)


class Notification(Base):
    """An e-mail to send (the outbox): written in the transaction of the event it tells
    of, sent afterwards by :class:`tether_desk.notify.Outbox`, once per ``key``."""

    __tablename__ = "notifications"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(200), unique=True)
    to_addr: Mapped[str] = mapped_column(String(254))
    subject: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    sent_at: Mapped[datetime | None] = mapped_column(DateTime, default=None, index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str] = mapped_column(Text, default="")


class WebSession(Base):
    """A logged-in browser: the cookie holds a random token, ``id`` is its SHA-256.
    Deleting the row ends the session (logout, "log out everywhere", expiry)."""

    __tablename__ = "web_sessions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    role: Mapped[str] = mapped_column(String(16))
    account_id: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime)
    """The absolute end, set at login; idle expiry is read from ``last_seen_at``."""
    __table_args__ = (Index("ix_web_sessions_account", "role", "account_id"),)


class LoginThrottle(Base):
    """Failed logins of one key (``account:<email>`` or ``address:<ip>``) and until when
    the key is locked."""

    __tablename__ = "login_throttle"
    key: Mapped[str] = mapped_column(String(300), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer)
    last_failure: Mapped[datetime] = mapped_column(DateTime)
    locked_until: Mapped[datetime | None] = mapped_column(DateTime, default=None)


class Setting(Base):
    """Key-value settings the desk keeps for itself (the session signing secret)."""

    __tablename__ = "settings"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
