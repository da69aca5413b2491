"""Reading orders: status and amounts only, never the address or the payment method.

Order numbers are matched exactly, in ASCII (``C-`` and four digits): a homoglyph
(a Cyrillic ``C``), a Unicode dash, full-width or Arabic-Indic digits, or a zero-width
character in the number match no order at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import Connection, bindparam, func, select
from sqlalchemy.orm import Session

from tether_desk.errors import InvalidInput, NotFound
from tether_desk.models import Approval, Order, Refund

ORDER_NUMBER = re.compile(r"C-[0-9]{4}", re.ASCII)

_REFUNDED = (
    select(func.coalesce(func.sum(Refund.amount_cents), 0))
    .where(Refund.order_id == Order.id)
    .scalar_subquery()
)
_VIEW_COLUMNS = (
    Order.id,
    Order.number,
    Order.status,
    Order.amount_paid_cents,
    _REFUNDED,
    Order.currency,
)
"""Column by column: never the address or the payment method."""
_ORDER_VIEW = select(*_VIEW_COLUMNS).where(Order.id == bindparam("order_id"))
_WAITING = (
    select(Approval.id)
    .where(Approval.ticket_id == bindparam("ticket_id"), Approval.status == "pending")
    .scalar_subquery()
)
_ORDER_VIEW_AND_WAITING = select(*_VIEW_COLUMNS, _WAITING).where(Order.id == bindparam("order_id"))
_ORDER_VIEW_AND_OWN = select(
    *_VIEW_COLUMNS,
    select(Refund.amount_cents)
    .where(Refund.idempotency_key == bindparam("key"), Refund.order_id == Order.id)
    .scalar_subquery(),
).where(Order.id == bindparam("order_id"))
_REFUNDED_TOTAL = select(func.coalesce(func.sum(Refund.amount_cents), 0)).where(
    Refund.order_id == bindparam("order_id")
)
_CUSTOMER_ORDER = select(Order.id).where(
    Order.number == bindparam("number"), Order.customer_id == bindparam("customer_id")
)


@dataclass(frozen=True, slots=True)
class OrderView:
    """What a tool, a customer or an approver may see of an order."""

    id: int
    number: str
    status: str
    paid_cents: int
    refunded_cents: int
    currency: str

    @property
    def remaining_cents(self) -> int:
        """What can still be refunded."""
        return self.paid_cents - self.refunded_cents


def check_number(number: str) -> str:
    """``number`` if it is exactly an order number in ASCII, else :class:`InvalidInput`."""
    if not isinstance(number, str) or ORDER_NUMBER.fullmatch(number) is None:
        raise InvalidInput("An order number is C- followed by four digits, like C-1042.")
    return number


def refunded_cents(session: Session | Connection, order_id: int) -> int:
    """The total already refunded on an order."""
    return int(session.scalar(_REFUNDED_TOTAL, {"order_id": order_id}) or 0)


def order_view(session: Session | Connection, order_id: int) -> OrderView:
    """Status and amounts of an order (selected column by column: no address, no payment)."""
    row = session.execute(_ORDER_VIEW, {"order_id": order_id}).one_or_none()
    if row is None:
        raise NotFound("No such order.")
    return OrderView(row[0], row[1], row[2], row[3], int(row[4]), row[5])


def order_view_and_waiting(
    session: Session | Connection, order_id: int, ticket_id: int
) -> tuple[OrderView, int | None]:
    """The order's view and the id of the ticket's pending refund approval, if one waits
    (one statement)."""
    row = session.execute(
        _ORDER_VIEW_AND_WAITING, {"order_id": order_id, "ticket_id": ticket_id}
    ).one_or_none()
    if row is None:
        raise NotFound("No such order.")
    return OrderView(row[0], row[1], row[2], row[3], int(row[4]), row[5]), row[6]


def order_view_and_own_refund(
    session: Session | Connection, order_id: int, key: str
) -> tuple[OrderView, int]:
    """The order's view and what the refund under idempotency ``key`` already refunded on
    it (0: none), in one statement."""
    row = session.execute(_ORDER_VIEW_AND_OWN, {"order_id": order_id, "key": key}).one_or_none()
    if row is None:
        raise NotFound("No such order.")
    return OrderView(row[0], row[1], row[2], row[3], int(row[4]), row[5]), int(row[6] or 0)


def customer_orders(session: Session, customer_id: int) -> list[OrderView]:
    """The customer's own orders, newest first."""
    ids = session.scalars(
        select(Order.id).where(Order.customer_id == customer_id).order_by(Order.id.desc())
    ).all()
    return [order_view(session, i) for i in ids]


def customer_order_id(session: Session | Connection, customer_id: int, number: str) -> int:
    """The id of the customer's order ``number``; :class:`NotFound` if it is not theirs
    (the same answer whether it belongs to someone else or does not exist)."""
    check_number(number)
    order_id = session.scalar(_CUSTOMER_ORDER, {"number": number, "customer_id": customer_id})
    if order_id is None:
        raise NotFound(f"You have no order {number}; pick one of your orders.")
    return int(order_id)
