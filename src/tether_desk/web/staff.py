"""Staff pages: the inbox, a ticket with its live trace, the approval queue and screen,
drafts to edit and send, the ledger. Only staff reach any of them."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Form, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, Field
from sqlalchemy import func, select

from tether_desk.approvals import queue, screen, ticket_approvals
from tether_desk.decisions import claim_decision, resume
from tether_desk.errors import DeskError
from tether_desk.inbox import inbox_page
from tether_desk.models import Order, Refund, Ticket
from tether_desk.models import Staff as StaffRow
from tether_desk.money import parse_amount
from tether_desk.operations.attention import attention_for_page, tickets_needing_attention
from tether_desk.orders import order_view
from tether_desk.pipeline import Desk
from tether_desk.tickets import MAX_BODY, draft_of, get_ticket, save_draft, send_reply
from tether_desk.trace import run_events, ticket_runs
from tether_desk.web.app import render
from tether_desk.web.deps import DeskDep, Staff, WorkerDep
from tether_desk.web.helpdesk import helpdesk_context
from tether_desk.web.inbox_rows import inbox_filters, inbox_pager, inbox_rows
from tether_desk.web.query import documented, query_of

router = APIRouter(prefix="/staff")
Page = Annotated[int, Query(ge=1, le=100_000)]
Id = Annotated[int, Path(ge=1, le=2**31 - 1)]
TicketId = Annotated[int, Query(ge=1, le=2**31 - 1)]
Version = Annotated[int, Form(ge=0, le=2**31 - 1)]
STATUSES = (
    "new",
    "triaging",
    "awaiting_approval",
    "draft_ready",
    "needs_human",
    "failed",
    "answered",
)
LEDGER_PAGE = 25


class InboxQuery(BaseModel):
    """The inbox's query: which page, of which tickets."""

    page: int = Field(1, ge=1, le=100_000)
    status: str | None = Field(None, max_length=32)
    before: int | None = Field(None, ge=1, le=2**31 - 1)
    """The page of tickets older than this one (the pager's links)."""
    after: int | None = Field(None, ge=1, le=2**31 - 1)
    """The page of tickets newer than this one."""
    assigned: str | None = Field(None, pattern="^(me|none|[0-9]{1,9})$")
    """Only mine (``me``), unassigned (``none``) or a colleague's (their id)."""


@router.get("/inbox", response_class=HTMLResponse, openapi_extra=documented(InboxQuery))
async def staff_inbox(
    request: Request, who: Staff, q: Annotated[InboxQuery, Depends(query_of(InboxQuery))]
) -> Response:
    """Every ticket with its triage result and status, newest first (``before``/``after``:
    the page next to a ticket id, as the pager's links ask); ``assigned``: only mine,
    unassigned (``none``) or a colleague's (their id)."""
    desk: Desk = request.app.state.desk  # not a dependency: each costs a resolution
    before, after, assigned = q.before, q.after, q.assigned
    chosen = q.status if q.status in STATUSES else None
    owner: int | Literal["any"] | None = "any"
    if assigned is not None:
        owner = who.id if assigned == "me" else None if assigned == "none" else int(assigned)
    found = inbox_page(
        desk.db,
        q.page,
        status=chosen,
        assignee=owner,
        before=before,
        after=after,
        wait_target=desk.helpdesk.wait_target,
    )  # one indexed statement: on the loop, cheaper than a worker-thread hop
    template = "inbox_rows.html" if request.headers.get("hx-request") else "inbox.html"
    cursor = f"&before={before}" if before else f"&after={after}" if after else ""
    return render(
        request,
        template,
        page=found.page,
        status=chosen,
        filters=inbox_filters(chosen, assigned, STATUSES),
        cursor=cursor,
        assigned=assigned,
        rows=inbox_rows(found, await attention_for_page(desk)),
        pager=inbox_pager(found.page, chosen, assigned),
    )


@router.get("/tickets/{ticket_id}", response_class=HTMLResponse)
def staff_ticket(request: Request, who: Staff, desk: DeskDep, ticket_id: Id) -> Response:
    """A ticket: raw text with flags, its runs and their traces, approvals, the draft."""
    ticket = get_ticket(desk.db, ticket_id)
    with desk.db.read() as s:
        order = order_view(s, ticket.order_id)
    flags = desk.detector(ticket.body, order.number)
    from tether_desk.detector import segments

    runs = [(run, run_events(desk.db, run.id)) for run in ticket_runs(desk.db, ticket_id)]
    return render(
        request,
        "staff_ticket.html",
        ticket=ticket,
        order=order,
        text=segments(ticket.body, flags),
        flags=flags,
        runs=runs,
        approvals=ticket_approvals(desk.db, ticket_id),
        draft=draft_of(desk.db, ticket_id),
        max_body=MAX_BODY,
        **helpdesk_context(desk.db, ticket_id),
        attention=tickets_needing_attention(desk),
    )


@router.post("/tickets/{ticket_id}/draft", response_class=HTMLResponse)
def staff_save_draft(
    request: Request,
    who: Staff,
    desk: DeskDep,
    ticket_id: Id,
    body: Annotated[str, Form(max_length=MAX_BODY * 4)],
    draft_version: Version,
) -> Response:
    """Save the reply draft (edited by staff) over the version the editor started from
    (0: none); nothing is sent. A draft changed meanwhile is not overwritten."""
    save_draft(desk.db, ticket_id, body, "staff", expected_version=draft_version)
    return RedirectResponse(f"/staff/tickets/{ticket_id}#draft", status_code=303)


@router.post("/tickets/{ticket_id}/send", response_class=HTMLResponse)
def staff_send(
    request: Request,
    who: Staff,
    desk: DeskDep,
    ticket_id: Id,
    ticket_version: Version,
    draft_version: Version,
) -> Response:
    """Send the draft to the customer: exactly the draft version this screen showed, on
    the ticket as it showed it; otherwise a page says what changed."""
    send_reply(
        desk.db, ticket_id, who.id, ticket_version=ticket_version, draft_version=draft_version
    )
    return RedirectResponse(f"/staff/tickets/{ticket_id}", status_code=303)


@router.get("/approvals", response_class=HTMLResponse)
def staff_approvals(
    request: Request,
    who: Staff,
    desk: DeskDep,
    page: Page = 1,
    status: Annotated[str, Query(pattern="^(pending|approved|denied|expired)$")] = "pending",
) -> Response:
    """The approval queue, oldest first."""
    rows, page, pages = queue(desk.db, page, status)
    return render(request, "approvals.html", rows=rows, page=page, pages=pages, status=status)


@router.get("/approvals/{approval_id}", response_class=HTMLResponse)
def staff_approval(request: Request, who: Staff, desk: DeskDep, approval_id: Id) -> Response:
    """The approval screen."""
    return render(request, "approval.html", screen=screen(desk.db, approval_id, desk.detector))


@router.post("/approvals/{approval_id}", response_class=HTMLResponse)
def staff_decide(
    request: Request,
    who: Staff,
    desk: DeskDep,
    worker: WorkerDep,
    approval_id: Id,
    decision: Annotated[str, Form(pattern="^(approve|deny)$")],
    arguments_hash: Annotated[str, Form(min_length=1, max_length=64)],
    typed_amount: Annotated[str, Form(max_length=32)] = "",
    reason: Annotated[str, Form(max_length=2000)] = "",
    approve_amount: Annotated[str, Form(max_length=32)] = "",
) -> Response:
    """Approve (the amount proposed, or the lower ``approve_amount``) or deny the call
    whose arguments hash the screen showed; the run resumes in the background and the
    ticket page shows it."""
    try:
        lower = parse_amount(approve_amount) if approve_amount.strip() else None
        claimed = claim_decision(
            desk,
            approval_id,
            who.id,
            approve=decision == "approve",
            typed_amount=typed_amount,
            reason=reason,
            arguments_hash=arguments_hash,
            approve_cents=lower,
        )
    except DeskError as exc:
        return render(
            request,
            "approval.html",
            exc.status_code,
            screen=screen(desk.db, approval_id, desk.detector),
            error=str(exc),
        )
    worker.spawn(resume(desk, claimed))
    return RedirectResponse(f"/staff/tickets/{claimed.ticket_id}", status_code=303)


@router.get("/ledger", response_class=HTMLResponse)
def staff_ledger(request: Request, who: Staff, desk: DeskDep, page: Page = 1) -> Response:
    """Every refund, newest first."""
    with desk.db.read() as s:
        total = int(s.scalar(select(func.count(Refund.id))) or 0)
        pages = max(1, -(-total // LEDGER_PAGE))
        page = min(page, pages)
        rows = s.execute(
            select(
                Refund.id,
                Order.number,
                Refund.amount_cents,
                Refund.ticket_id,
                StaffRow.name,
                Refund.created_at,
                Refund.idempotency_key,
            )
            .join(Order, Order.id == Refund.order_id)
            .outerjoin(StaffRow, StaffRow.id == Refund.approved_by)
            .order_by(Refund.id.desc())
            .limit(LEDGER_PAGE)
            .offset((page - 1) * LEDGER_PAGE)
        ).all()
        open_tickets = int(
            s.scalar(select(func.count(Ticket.id)).where(Ticket.status != "answered")) or 0
        )
    return render(
        request, "ledger.html", rows=rows, page=page, pages=pages, open_tickets=open_tickets
    )
