"""What a person sees before approving a refund, built against approval fatigue.

The screen shows what the call alone does not say: the raw ticket with its
instruction-like sentences flagged and explained, the amount beside what was paid and
already refunded (read live, not from when the model asked), where each argument's value
came from, and when the approval expires. Friction grows with risk: a refund of the whole
remaining amount, one on a ticket whose text carries instructions, or any approval after
the first on the same order or ticket, must be confirmed by typing the amount. Every other
pending or approved proposal on the order is shown, and the remaining amount counts the
approved ones not yet paid.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, case, func, insert, select
from sqlalchemy.orm import Session

from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.detector import (
    DeskFlagKind,
    Detector,
    Flag,
    Segment,
    flag_instructions,
    fold,
    segments,
)
from tether_desk.errors import NotFound
from tether_desk.models import Approval, Customer, Order, Refund, Ticket
from tether_desk.money import format_cents
from tether_desk.orders import OrderView, order_view
from tether_desk.thread import customer_messages, customer_text

PAGE_SIZE = 25
_INSERT_APPROVAL = insert(Approval).returning(Approval.id)
_OF_CALL = select(Approval.id).where(
    Approval.run_id == bindparam("run_id_"), Approval.call_id == bindparam("call_id_")
)


@dataclass(frozen=True, slots=True)
class Origin:
    """Where one argument's value came from."""

    argument: str
    value: str
    origin: str
    risky: bool = False


@dataclass(frozen=True, slots=True)
class Other:
    """Another refund proposal on the same order, pending or approved."""

    approval_id: int
    ticket_id: int
    status: str
    amount_cents: int
    refunded: bool
    """Approved and already in the ledger (else approved and not yet paid, or pending)."""


@dataclass(frozen=True, slots=True)
class Commitments:
    """What an order owes beyond its ledger: other proposals, and approvals on the same
    order or ticket before this one."""

    others: list[Other]
    approved_unpaid_cents: int
    """Approved elsewhere, not yet in the ledger: as good as refunded."""
    pending_cents: int
    """Waiting for a decision elsewhere."""
    prior_approvals: int
    """Approvals already granted on the same order or the same ticket."""


_SAME_ORDER_OR_TICKET = select(Ticket.id).where(
    (Ticket.order_id == bindparam("order_id")) | (Ticket.id == bindparam("ticket_id"))
)
"""The tickets on the order, and the ticket itself. Their approvals are found by the
``ticket_id`` index; a status in the ``WHERE`` would let SQLite (no statistics) walk every
approval of that status instead, so the status is checked on the few rows found."""
_COMMITMENTS = (
    select(
        Approval.id,
        Approval.ticket_id,
        Approval.status,
        func.coalesce(Approval.approved_cents, Approval.amount_cents),
        select(Refund.id)
        .where(Refund.idempotency_key == Approval.run_id + ":" + Approval.call_id)
        .scalar_subquery(),
    )
    .where(Approval.ticket_id.in_(_SAME_ORDER_OR_TICKET), Approval.id != bindparam("approval_id"))
    .order_by(Approval.id)
)


def commitments(
    connection: Session | Connection, approval_id: int, ticket_id: int, order_id: int
) -> Commitments:
    """The other pending and approved proposals on ``order_id`` (or the same ticket)
    than ``approval_id``, read in the caller's transaction."""
    rows = connection.execute(
        _COMMITMENTS, {"order_id": order_id, "ticket_id": ticket_id, "approval_id": approval_id}
    ).all()
    others = [
        Other(r[0], r[1], r[2], int(r[3]), r[4] is not None)
        for r in rows
        if r[2] in ("pending", "approved")
    ]
    approved = [o for o in others if o.status == "approved"]
    return Commitments(
        others,
        sum(o.amount_cents for o in approved if not o.refunded),
        sum(o.amount_cents for o in others if o.status == "pending"),
        len(approved),
    )


@dataclass(frozen=True, slots=True)
class Owed:
    """What an order owes beyond its paid amount, in totals (one statement): the ledger,
    and the approvals on the same order or ticket than the one being decided."""

    refunded_cents: int
    """In the ledger."""
    approved_unpaid_cents: int
    """Approved elsewhere, not yet in the ledger: as good as refunded."""
    prior_approvals: int
    """Approvals already granted on the same order or the same ticket."""


_PAID = (
    select(Refund.id)
    .where(Refund.idempotency_key == Approval.run_id + ":" + Approval.call_id)
    .exists()
)
_APPROVED = Approval.status == "approved"
_OWED = select(
    select(func.coalesce(func.sum(Refund.amount_cents), 0))
    .where(Refund.order_id == bindparam("order_id"))
    .scalar_subquery(),
    func.coalesce(
        func.sum(
            case(
                (_APPROVED & ~_PAID, func.coalesce(Approval.approved_cents, Approval.amount_cents)),
                else_=0,
            )
        ),
        0,
    ),
    func.count(case((_APPROVED, Approval.id))),
).where(Approval.ticket_id.in_(_SAME_ORDER_OR_TICKET), Approval.id != bindparam("approval_id"))


def owed(connection: Session | Connection, approval_id: int, ticket_id: int, order_id: int) -> Owed:
    """The ledger's total on ``order_id`` and the totals of :func:`commitments`' approved
    proposals, in one statement in the caller's transaction (read it after the order's
    lock: see :mod:`tether_desk.refunds`)."""
    params = {"order_id": order_id, "ticket_id": ticket_id, "approval_id": approval_id}
    refunded, unpaid, prior = connection.execute(_OWED, params).one()
    return Owed(int(refunded), int(unpaid), int(prior))


@dataclass(frozen=True, slots=True)
class Screen:
    """Everything the approval page (and the terminal demo) shows."""

    approval_id: int
    status: str
    tool: str
    call_id: str
    arguments_hash: str
    ticket_id: int
    subject: str
    customer: str
    order: OrderView
    amount_cents: int
    reason: str
    text: list[Segment]
    flags: list[Flag]
    origins: list[Origin]
    typed_amount_required: bool
    friction: list[str]
    created_at: datetime
    expires_at: datetime
    committed: Commitments
    since: list[tuple[int, str, datetime]] = field(default_factory=list)
    """The customer's messages the proposal's round had not read (id, text, time): they
    wrote while it waited; the ticket runs again on them once this proposal is decided."""

    @property
    def remaining_cents(self) -> int:
        """What can really still be refunded: paid, less the ledger, less what was
        approved elsewhere and not yet paid."""
        return self.order.remaining_cents - self.committed.approved_unpaid_cents

    @property
    def payable(self) -> bool:
        """False when the ledger could not pay this amount now: approving is refused."""
        return 0 < self.amount_cents <= self.remaining_cents

    @property
    def after_cents(self) -> int:
        """What would be refunded in total after this refund (approvals elsewhere
        included)."""
        return self.order.paid_cents - self.remaining_cents + self.amount_cents

    @property
    def expired(self) -> bool:
        """True once the approval can no longer be granted."""
        return utcnow() >= self.expires_at

    def money(self, cents: int) -> str:
        """Cents as euros for display."""
        return format_cents(cents)


PLAIN_REQUEST: DeskFlagKind = "imperative"
"""The detector's kind for a request in the imperative ("can you refund me?"): a customer
asking is flagged for the reader, but only passages that try to steer the approver or the
agent (a claimed approval, a fake note, other orders, addresses, links...) add friction.
The rule reads the kind, never the reason's wording."""


def steering(flags: list[Flag]) -> list[Flag]:
    """The flags that try to steer the approver or the agent."""
    return [f for f in flags if f.kind != PLAIN_REQUEST]


def friction_for(amount_cents: int, remaining_cents: int, flags: list[Flag]) -> list[str]:
    """Why the amount must be typed to confirm (empty: a click is enough)."""
    why = []
    if amount_cents >= remaining_cents:
        why.append("it refunds everything that remains on the order")
    pushing = steering(flags)
    if pushing:
        why.append(f"the ticket's text carries {len(pushing)} passage(s) that try to steer you")
    return why


def _amount_in_text(cents: int, text: str) -> bool:
    folded, _ = fold(text)
    euros, rest = divmod(cents, 100)
    forms = {f"{euros}[.,]{rest:02d}"} if rest else {rf"{euros}(?:[.,]00?)?"}
    if rest % 10 == 0 and rest:
        forms.add(f"{euros}[.,]{rest // 10}")
    pattern = rf"(?<![0-9.,])(?:{'|'.join(forms)})(?![0-9]|[.,][0-9])"
    return re.search(pattern, folded) is not None


def argument_origins(
    arguments: dict[str, Any],
    body: str,
    view: OrderView,
    messages: Sequence[tuple[int, str, datetime]] = (),
) -> list[Origin]:
    """Per argument, where its value came from: the account, the order record, the
    customer's text (third party; the newest of ``messages`` that holds it, when given) or
    the model alone."""
    out = [Origin("order", view.number, "the customer's account (the tool has no order parameter)")]
    amount = arguments.get("amount")
    if isinstance(amount, int | float) and not isinstance(amount, bool):
        cents = round(amount * 100)
        cited = next((m for m in reversed(messages) if _amount_in_text(cents, m[1])), None)
        if cited is not None:
            origin = (
                f"the customer's message #{cited[0]} of {cited[2]:%Y-%m-%d %H:%M} (third party)"
            )
            risky = True
        elif _amount_in_text(cents, body):
            origin, risky = "the ticket's text, written by the customer (third party)", True
        elif cents in (view.paid_cents, view.remaining_cents):
            origin, risky = "the order record (amount paid or remaining)", False
        else:
            origin, risky = "the model (no source in the ticket or the order)", True
        out.append(Origin("amount", format_cents(cents), origin, risky))
    reason = arguments.get("reason")
    if isinstance(reason, str):
        out.append(Origin("reason", reason[:500], "written by the model"))
    return out


def insert_approval(connection: Connection, values: dict[str, Any]) -> int:
    """Store a pending approval in the caller's transaction; returns its id. Raises
    :class:`sqlalchemy.exc.IntegrityError` if one already waits for the ticket."""
    return int(connection.scalar(_INSERT_APPROVAL, values) or 0)


def approval_of_call(connection: Connection, run_id: str, call_id: str) -> int | None:
    """The id of the approval stored for ``call_id`` of run ``run_id``, if there is one."""
    found = connection.scalar(_OF_CALL, {"run_id_": run_id, "call_id_": call_id})
    return int(found) if found is not None else None


def screen(db: Database, approval_id: int, detector: Detector = flag_instructions) -> Screen:
    """The approval screen of ``approval_id`` with live amounts."""
    with db.read() as s:
        a = s.get(Approval, approval_id)
        if a is None:
            raise NotFound(f"There is no approval {approval_id}.")
        ticket = s.get(Ticket, a.ticket_id)
        assert ticket is not None
        customer = s.get(Customer, ticket.customer_id)
        view = order_view(s, ticket.order_id)
        messages = customer_messages(s.connection(), ticket.id)
        body = customer_text(s.connection(), ticket.id) or ticket.body
        committed = commitments(s, a.id, ticket.id, ticket.order_id)
    seen = a.context.get("seen") if isinstance(a.context, dict) else None
    flags = detector(body, view.number)
    friction = friction_for(a.amount_cents, view.remaining_cents, flags)
    if committed.prior_approvals:
        friction.append(
            f"{committed.prior_approvals} refund(s) were already approved on this order or ticket"
        )
    return Screen(
        approval_id=a.id,
        status=a.status,
        tool=a.tool,
        call_id=a.call_id,
        arguments_hash=a.arguments_hash,
        ticket_id=ticket.id,
        subject=ticket.subject,
        customer=customer.name if customer else "?",
        order=view,
        amount_cents=a.amount_cents,
        reason=str(a.arguments.get("reason", "")),
        text=segments(body, flags),
        flags=flags,
        origins=argument_origins(dict(a.arguments), body, view, messages),
        typed_amount_required=a.typed_amount_required or committed.prior_approvals > 0,
        friction=friction,
        created_at=a.created_at,
        expires_at=a.expires_at,
        committed=committed,
        since=[m for m in messages if m[0] > seen] if isinstance(seen, int) else [],
    )


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One line of the approval queue."""

    id: int
    ticket_id: int
    order: str
    customer: str
    amount: str
    status: str
    created_at: datetime
    expires_at: datetime


def queue(db: Database, page: int = 1, status: str = "pending") -> tuple[list[QueueRow], int, int]:
    """Approvals of one status, oldest first: rows, page, pages."""
    with db.read() as s:
        total = int(s.scalar(select(func.count(Approval.id)).where(Approval.status == status)) or 0)
        pages = max(1, -(-total // PAGE_SIZE))
        page = min(max(page, 1), pages)
        rows = s.execute(
            select(
                Approval.id,
                Approval.ticket_id,
                Order.number,
                Customer.name,
                Approval.amount_cents,
                Approval.status,
                Approval.created_at,
                Approval.expires_at,
            )
            .join(Ticket, Ticket.id == Approval.ticket_id)
            .join(Order, Order.id == Ticket.order_id)
            .join(Customer, Customer.id == Ticket.customer_id)
            .where(Approval.status == status)
            .order_by(Approval.id)
            .limit(PAGE_SIZE)
            .offset((page - 1) * PAGE_SIZE)
        ).all()
    out = [QueueRow(r[0], r[1], r[2], r[3], format_cents(r[4]), r[5], r[6], r[7]) for r in rows]
    return out, page, pages


def ticket_approvals(db: Database, ticket_id: int) -> list[Approval]:
    """Every approval of a ticket, oldest first."""
    with db.read() as s:
        rows = s.scalars(
            select(Approval).where(Approval.ticket_id == ticket_id).order_by(Approval.id)
        ).all()
        for r in rows:
            s.expunge(r)
        return list(rows)
