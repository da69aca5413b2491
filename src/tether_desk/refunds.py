"""The refund ledger: the course's rule, in the service, on the cumulative total.

``refund`` checks ``0 < amount`` and ``already refunded + amount <= paid`` and writes the
ledger row in one transaction that holds the order while it decides: ``BEGIN IMMEDIATE``
on SQLite (one writer at a time), ``SELECT ... FOR UPDATE`` on the order's row on
PostgreSQL. The idempotency key (the tool call's id within its run) is unique: a retried
or resumed call finds its own row and refunds nothing more.

Three statements: lock the order, then read the ledger (what was refunded, and the key's
row if any) and insert. The ledger is read by a statement *after* the lock on purpose: on
PostgreSQL (read committed) each statement sees what was committed when it starts, so a
sum computed inside the locking statement could miss the refund of the transaction it
waited for.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import bindparam, case, func, insert, select
from sqlalchemy.exc import IntegrityError

from tether_desk.db import Database
from tether_desk.errors import InvalidInput, RuleViolation
from tether_desk.models import Approval, Order, Refund
from tether_desk.money import format_cents
from tether_desk.orders import refunded_cents

_LOCK_ORDER = (
    select(Order.id, Order.number, Order.amount_paid_cents)
    .where(Order.id == bindparam("order_id"))
    .with_for_update()
)
_BY_KEY = select(Refund.order_id, Refund.amount_cents).where(
    Refund.idempotency_key == bindparam("key")
)
_LEDGER = select(
    select(func.coalesce(func.sum(Refund.amount_cents), 0))
    .where(Refund.order_id == bindparam("order_id"))
    .scalar_subquery(),
    _BY_KEY.with_only_columns(Refund.order_id).scalar_subquery(),
    _BY_KEY.with_only_columns(Refund.amount_cents).scalar_subquery(),
)
_APPROVED_CENTS = (  # by the run's index: a status in the WHERE would walk every approved
    select(func.max(case((Approval.status == "approved", Approval.approved_cents))))
    .where(Approval.run_id == bindparam("run_id"), Approval.call_id == bindparam("call_id"))
    .scalar_subquery()
)
_LEDGER_AND_APPROVED = _LEDGER.add_columns(_APPROVED_CENTS)
"""The ledger, and the amount staff approved for the call (``None``: as proposed)."""
_INSERT = insert(Refund)


@dataclass(frozen=True, slots=True)
class RefundResult:
    """What a refund call did: ``refunded`` now, or ``already_done`` under this key."""

    status: str
    order: str
    amount_cents: int
    total_refunded_cents: int
    paid_cents: int

    def sentence(self) -> str:
        """One sentence for the model and the trace."""
        done = "Already done under this key" if self.status == "already_done" else "Refunded"
        return (
            f"{done}: {format_cents(self.amount_cents)} EUR on {self.order}; "
            f"{format_cents(self.total_refunded_cents)} of {format_cents(self.paid_cents)} EUR "
            "refunded in total."
        )


def refund(
    db: Database,
    order_id: int,
    amount_cents: int,
    key: str,
    *,
    ticket_id: int | None = None,
    approved_by: int | None = None,
    approval: tuple[str, str] | None = None,
) -> RefundResult:
    """Refund ``amount_cents`` on the order unless the cumulative total would pass what
    was paid; a second call with the same ``key`` refunds nothing and says so.
    ``approval``: the (run id, call id) of the approval the refund carries out; if staff
    approved less than was proposed, that amount is refunded (read in the same statement
    as the ledger: the result's ``amount_cents`` says which)."""
    if not key or len(key) > 200:
        raise InvalidInput("A refund needs an idempotency key of 1 to 200 characters.")
    try:
        return _refund_once(db, order_id, amount_cents, key, ticket_id, approved_by, approval)
    except IntegrityError:
        # Another transaction inserted this key between our check and our insert.
        return _replayed(db, key)


def _refund_once(
    db: Database,
    order_id: int,
    amount_cents: int,
    key: str,
    ticket_id: int | None,
    approved_by: int | None,
    approval: tuple[str, str] | None = None,
) -> RefundResult:
    with db.write_connection() as s:
        order = s.execute(_LOCK_ORDER, {"order_id": order_id}).one_or_none()
        if order is None:
            raise InvalidInput("Refund refused: there is no such order.")
        params = {"order_id": order_id, "key": key}
        if approval is None:
            done, key_order, key_amount = s.execute(_LEDGER, params).one()
        else:
            run_id, call_id = approval
            row = s.execute(_LEDGER_AND_APPROVED, {**params, "run_id": run_id, "call_id": call_id})
            done, key_order, key_amount, approved = row.one()
            if approved is not None:
                amount_cents = min(amount_cents, int(approved))
        done = int(done)
        if key_order is not None:
            if key_order != order_id or key_amount != amount_cents:
                raise RuleViolation(
                    "Refund refused: this idempotency key was already used for another refund."
                )
            return RefundResult("already_done", order.number, amount_cents, done, order[2])
        if amount_cents <= 0:
            raise RuleViolation("Refund refused: the amount must be above zero.")
        if done + amount_cents > order[2]:
            raise RuleViolation(
                f"Refund refused: {format_cents(amount_cents)} EUR asked, "
                f"{format_cents(done)} of {format_cents(order[2])} EUR already refunded on "
                f"{order.number}; at most {format_cents(order[2] - done)} EUR remains."
            )
        s.execute(
            _INSERT,
            {
                "order_id": order_id,
                "amount_cents": amount_cents,
                "idempotency_key": key,
                "ticket_id": ticket_id,
                "approved_by": approved_by,
            },
        )
        return RefundResult("refunded", order.number, amount_cents, done + amount_cents, order[2])


def _replayed(db: Database, key: str) -> RefundResult:
    with db.read() as s:
        row = s.scalar(select(Refund).where(Refund.idempotency_key == key))
        if row is None:  # pragma: no cover - the unique index said it exists
            raise RuleViolation("Refund refused: the ledger changed; try again.")
        order = s.execute(
            select(Order.number, Order.amount_paid_cents).where(Order.id == row.order_id)
        ).one()
        total = refunded_cents(s, row.order_id)
        return RefundResult("already_done", order[0], row.amount_cents, total, order[1])
