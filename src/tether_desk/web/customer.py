"""Customer pages: their tickets (and only theirs), opening one, reading the reply."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tether_desk.errors import DeskError, RateLimited
from tether_desk.orders import customer_orders, order_view
from tether_desk.thread import thread
from tether_desk.tickets import (
    MAX_BODY,
    MAX_SUBJECT,
    customer_ticket,
    customer_tickets,
    open_ticket,
)
from tether_desk.web.app import render
from tether_desk.web.deps import Customer, DeskDep, WorkerDep, ticket_rate

router = APIRouter(prefix="/my")
Page = Annotated[int, Query(ge=1, le=100_000)]
TicketId = Annotated[int, Path(ge=1, le=2**31 - 1)]
Cursor = Annotated[int, Query(ge=1, le=2**31 - 1)]


@router.get("/tickets", response_class=HTMLResponse)
def my_tickets(
    request: Request,
    who: Customer,
    desk: DeskDep,
    page: Page = 1,
    before: Cursor | None = None,
    after: Cursor | None = None,
) -> Response:
    """The customer's tickets, newest first."""
    rows = customer_tickets(desk.db, who.id, page, before=before, after=after)
    return render(request, "my_tickets.html", page=rows)


@router.get("/tickets/new", response_class=HTMLResponse)
def new_ticket_form(request: Request, who: Customer, desk: DeskDep) -> Response:
    """The form to open a ticket on one of the customer's orders."""
    with desk.db.read() as s:
        orders = customer_orders(s, who.id)
    return render(request, "new_ticket.html", orders=orders, max_body=MAX_BODY)


@router.post("/tickets", response_class=HTMLResponse)
def create_ticket(
    request: Request,
    who: Customer,
    desk: DeskDep,
    worker: WorkerDep,
    order: Annotated[str, Form(max_length=32)],
    subject: Annotated[str, Form(max_length=MAX_SUBJECT * 4)],
    text: Annotated[str, Form(max_length=MAX_BODY * 4)],
) -> Response:
    """Open a ticket; the order must be one of the customer's own."""
    try:
        ticket_id = open_ticket(desk.db, who.id, order, subject, text, rate=ticket_rate(request))
    except DeskError as exc:
        with desk.db.read() as s:
            orders = customer_orders(s, who.id)
        page = render(
            request,
            "new_ticket.html",
            exc.status_code,
            orders=orders,
            max_body=MAX_BODY,
            error=str(exc),
            subject=subject[:MAX_SUBJECT],
            text=text[:MAX_BODY],
        )
        if isinstance(exc, RateLimited):
            page.headers["retry-after"] = str(exc.retry_after)
        return page
    worker.kick()
    return RedirectResponse(f"/my/tickets/{ticket_id}", status_code=303)


@router.get("/tickets/{ticket_id}", response_class=HTMLResponse)
def my_ticket(request: Request, who: Customer, desk: DeskDep, ticket_id: TicketId) -> Response:
    """One of the customer's tickets, with the reply once staff sent it."""
    ticket = customer_ticket(desk.db, who.id, ticket_id)
    with desk.db.read() as s:
        order = order_view(s, ticket.order_id)
    messages = thread(desk.db, ticket_id, staff=False)
    return render(request, "my_ticket.html", ticket=ticket, order=order, thread=messages)
