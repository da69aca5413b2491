"""A small JSON API: a customer's orders and tickets (only theirs), opening a ticket.

Staff read any ticket. Every unsafe request carries the CSRF token in ``x-csrftoken``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, Field

from tether_desk.money import format_cents
from tether_desk.orders import customer_orders, order_view
from tether_desk.thread import thread
from tether_desk.tickets import (
    MAX_BODY,
    MAX_SUBJECT,
    customer_ticket,
    customer_tickets,
    get_ticket,
    inbox,
    open_ticket,
)
from tether_desk.web.deps import Anyone, Customer, DeskDep, WorkerDep, ticket_rate

router = APIRouter(prefix="/api")


class OrderOut(BaseModel):
    """An order as its customer sees it."""

    number: str
    status: str
    amount_paid: str
    already_refunded: str


class MessageOut(BaseModel):
    """One message of a ticket's thread (``kind``: customer, staff, system; for staff also
    agent and note)."""

    id: int
    kind: str
    author: str
    text: str
    at: str


class TicketOut(BaseModel):
    """A ticket."""

    id: int
    order: str
    subject: str
    status: str
    text: str | None = None
    reply: str | None = None
    messages: list[MessageOut] | None = None
    """The thread, in order (only on one ticket's own page): what the caller may see."""


class TicketPage(BaseModel):
    """One page of tickets."""

    tickets: list[TicketOut]
    page: int
    pages: int


class TicketIn(BaseModel):
    """A new ticket on one of the customer's orders."""

    order: str = Field(max_length=32, description="One of your order numbers, like C-1042.")
    subject: str = Field(max_length=MAX_SUBJECT * 4)
    text: str = Field(max_length=MAX_BODY * 4)


class Created(BaseModel):
    """The new ticket's id."""

    id: int


@router.get("/orders")
def api_orders(who: Customer, desk: DeskDep) -> list[OrderOut]:
    """The customer's orders."""
    with desk.db.read() as s:
        views = customer_orders(s, who.id)
    return [
        OrderOut(
            number=v.number,
            status=v.status,
            amount_paid=format_cents(v.paid_cents),
            already_refunded=format_cents(v.refunded_cents),
        )
        for v in views
    ]


@router.get("/tickets")
def api_tickets(
    who: Anyone, desk: DeskDep, page: Annotated[int, Query(ge=1, le=100_000)] = 1
) -> TicketPage:
    """Tickets: a customer's own, or every ticket for staff."""
    rows = (
        customer_tickets(desk.db, who.id, page) if who.role == "customer" else inbox(desk.db, page)
    )
    return TicketPage(
        tickets=[
            TicketOut(id=r.id, order=r.order, subject=r.subject, status=r.status) for r in rows.rows
        ],
        page=rows.page,
        pages=rows.pages,
    )


@router.get("/tickets/{ticket_id}")
def api_ticket(
    who: Anyone, desk: DeskDep, ticket_id: Annotated[int, Path(ge=1, le=2**31 - 1)]
) -> TicketOut:
    """One ticket: a customer's own (404 otherwise), any for staff."""
    if who.role == "customer":
        ticket = customer_ticket(desk.db, who.id, ticket_id)
    else:
        ticket = get_ticket(desk.db, ticket_id)
    with desk.db.read() as s:
        number = order_view(s, ticket.order_id).number
    return TicketOut(
        id=ticket.id,
        order=number,
        subject=ticket.subject,
        status=ticket.status,
        text=ticket.body,
        reply=ticket.reply,
        messages=[
            MessageOut(
                id=m.id, kind=m.kind, author=m.author, text=m.body, at=m.created_at.isoformat()
            )
            for m in thread(desk.db, ticket.id, staff=who.role == "staff")
        ],
    )


@router.post("/tickets", status_code=201)
def api_open_ticket(
    request: Request, who: Customer, desk: DeskDep, worker: WorkerDep, body: TicketIn
) -> Created:
    """Open a ticket on one of the customer's orders."""
    ticket_id = open_ticket(
        desk.db, who.id, body.order, body.subject, body.text, rate=ticket_rate(request)
    )
    worker.kick()
    return Created(id=ticket_id)
