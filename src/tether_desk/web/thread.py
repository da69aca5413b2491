"""Helpdesk pages and actions: the customer's reply (which reopens), staff notes,
assignment, search from the inbox, saved replies."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, Field

from tether_desk.assignment import assign
from tether_desk.errors import DeskError, InvalidInput
from tether_desk.pipeline import Desk
from tether_desk.saved_replies import add_saved_reply, filled, saved_replies
from tether_desk.search import search
from tether_desk.thread import add_note, customer_reply
from tether_desk.tickets import MAX_BODY, save_draft
from tether_desk.web.app import render
from tether_desk.web.deps import Customer, DeskDep, Staff, WorkerDep
from tether_desk.web.query import documented, query_of
from tether_desk.web.search_rows import search_rows

router = APIRouter()
Id = Annotated[int, Path(ge=1, le=2**31 - 1)]


@router.post("/my/tickets/{ticket_id}/reply", response_class=HTMLResponse)
def my_reply(
    request: Request,
    who: Customer,
    desk: DeskDep,
    worker: WorkerDep,
    ticket_id: Id,
    text: Annotated[str, Form(max_length=MAX_BODY * 4)],
) -> Response:
    """Answer on the ticket: adds information, or reopens an answered ticket within the
    reopen window; the desk reads the whole thread again."""
    if customer_reply(desk.db, who.id, ticket_id, text, desk.helpdesk):
        worker.kick()
    desk.changed(ticket_id)
    return RedirectResponse(f"/my/tickets/{ticket_id}#thread", status_code=303)


@router.post("/staff/tickets/{ticket_id}/notes", response_class=HTMLResponse)
def staff_note(
    request: Request,
    who: Staff,
    desk: DeskDep,
    ticket_id: Id,
    text: Annotated[str, Form(max_length=MAX_BODY * 4)],
) -> Response:
    """Add an internal note (never shown to the customer)."""
    add_note(desk.db, ticket_id, who.id, text)
    return RedirectResponse(f"/staff/tickets/{ticket_id}#thread", status_code=303)


@router.post("/staff/tickets/{ticket_id}/assign", response_class=HTMLResponse)
def staff_assign(
    request: Request,
    who: Staff,
    desk: DeskDep,
    ticket_id: Id,
    assignee: Annotated[str, Form(max_length=16)] = "",
    back: Annotated[str, Form(pattern="^(ticket|inbox)$")] = "ticket",
) -> Response:
    """Assign the ticket to me (``me``), to a colleague (their id) or to nobody (empty)."""
    if assignee == "me":
        target: int | None = who.id
    elif assignee.isdigit():
        target = int(assignee)
    elif assignee == "":
        target = None
    else:
        raise InvalidInput("Pick a staff member, yourself or nobody.")
    assign(desk.db, ticket_id, target)
    where = "/staff/inbox" if back == "inbox" else f"/staff/tickets/{ticket_id}"
    return RedirectResponse(where, status_code=303)


class SearchQuery(BaseModel):
    """What to search for."""

    q: str = Field("", max_length=10_000)


@router.get("/staff/search", response_class=HTMLResponse, openapi_extra=documented(SearchQuery))
async def staff_search(
    request: Request, who: Staff, query: Annotated[SearchQuery, Depends(query_of(SearchQuery))]
) -> Response:
    """Tickets whose subject or messages (notes included) hold every word of ``q`` (``async``
    like the inbox: a few indexed reads cost less than a worker-thread hop). A long query
    is searched by its first words and shown cut."""
    desk: Desk = request.app.state.desk  # not a dependency: each costs a resolution
    q = query.q
    hits = search(desk.db, q)
    return render(request, "search.html", q=q[:200], hits=hits, rows=search_rows(hits))


@router.get("/staff/saved-replies", response_class=HTMLResponse)
def staff_saved_replies(request: Request, who: Staff, desk: DeskDep) -> Response:
    """The saved replies, and a form to add one."""
    return render(request, "saved_replies.html", replies=saved_replies(desk.db))


@router.post("/staff/saved-replies", response_class=HTMLResponse)
def staff_add_saved_reply(
    request: Request,
    who: Staff,
    desk: DeskDep,
    title: Annotated[str, Form(max_length=400)],
    body: Annotated[str, Form(max_length=MAX_BODY * 4)],
) -> Response:
    """Save a reply for reuse."""
    try:
        add_saved_reply(desk.db, title, body)
    except DeskError as exc:
        replies = saved_replies(desk.db)
        return render(
            request, "saved_replies.html", exc.status_code, replies=replies, error=str(exc)
        )
    return RedirectResponse("/staff/saved-replies", status_code=303)


@router.post("/staff/tickets/{ticket_id}/saved-reply", response_class=HTMLResponse)
def staff_use_saved_reply(
    request: Request,
    who: Staff,
    desk: DeskDep,
    ticket_id: Id,
    reply: Annotated[int, Form(ge=1, le=2**31 - 1)],
) -> Response:
    """Put a saved reply, filled with the order's facts, in the ticket's draft."""
    save_draft(desk.db, ticket_id, filled(desk.db, reply, ticket_id), "staff")
    return RedirectResponse(f"/staff/tickets/{ticket_id}#draft", status_code=303)
