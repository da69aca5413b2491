"""The ticket pipeline: triage, then the path code chooses, with every effect in the DB.

:func:`process_ticket` is a plain async function of a ticket id. It claims the ticket
(``new`` -> ``triaging``, once), classifies it in one structured-output call, and then:

* ``tracking``: answers from the order's status, written by code;
* ``refund``: runs the refund agent; a proposed refund becomes a pending approval whose
  run state is stored in the database;
* ``other``: puts the ticket in the human queue.

Each step leaves its effect in the database, committed once (a run's state, its approval,
the ticket and the trace together), and a second call finds the ticket claimed; the
durable desk (:mod:`tether_desk.durable.flow`) runs these same pieces as steps. Rules the
desk applies before a person is asked (:func:`_screen_pending`): one refund proposal per
ticket at a time, and an amount above zero and within what remains; anything else is
refused in code and the model reads why.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any, Protocol

from sqlalchemy import Connection, Executable, bindparam, select, update
from sqlalchemy.exc import IntegrityError

from tether.clients import ChatClient
from tether.events import Listener
from tether.messages import Usage
from tether.outcomes import Decision, PendingApproval, RunResult, RunState
from tether_desk.agent import REFUND_PROMPT, TicketScope, refund_agent
from tether_desk.approvals import approval_of_call, friction_for, insert_approval
from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.detector import Detector, flag_instructions
from tether_desk.errors import NotFound
from tether_desk.helpdesk import HelpdeskSettings
from tether_desk.models import Customer, Draft, Message, Order, Ticket
from tether_desk.money import format_cents
from tether_desk.notify import Mailer, queue_approval, queue_reply
from tether_desk.orders import OrderView, order_view, order_view_and_waiting
from tether_desk.priority import PagesFirst
from tether_desk.thread import follow_up, joined_text, newest_within_cap
from tether_desk.tickets import MAX_BODY, agent_draft, set_ticket
from tether_desk.trace import RunRecorder
from tether_desk.triage import TriageResult, classify

log = logging.getLogger("tether_desk")
STATUS_LABELS = {
    "processing": "en preparation",
    "shipped": "expediee",
    "delivered": "livree",
    "cancelled": "annulee",
}
MAX_SETTLE_ROUNDS = 6
_SCOPE = (  # with the customer's messages, newest first (thread.customer_messages)
    select(
        Ticket.id,
        Ticket.order_id,
        Order.number,
        Customer.name,
        Ticket.subject,
        Ticket.body,
        Ticket.round,
        Message.id,
        Message.body,
        Message.created_at,
    )
    .join(Order, Order.id == Ticket.order_id)
    .join(Customer, Customer.id == Ticket.customer_id)
    .outerjoin(Message, (Message.ticket_id == Ticket.id) & (Message.kind == "customer"))
    .where(Ticket.id == bindparam("ticket_id_"))
    .order_by(Message.id.desc())
    .limit(50)
)
_TRIAGED = (
    update(Ticket)
    .where(Ticket.id == bindparam("ticket_id_"))
    .values(category=bindparam("category_"))
)
_STATUS = select(Ticket.status).where(Ticket.id == bindparam("ticket_id_"))
_CLAIM = (
    update(Ticket)
    .where(Ticket.id == bindparam("ticket_id_"), Ticket.status == "new")
    .values(status="triaging")
)


class TicketRuns(Protocol):
    """Where a durable desk sends its work instead of running it in the web process
    (:class:`tether_desk.durable.DurableDesk`: a queue that workers share)."""

    async def start(self) -> None:
        """Connect (and, in a worker, start taking tickets)."""

    async def stop(self) -> None:
        """Disconnect; runs in progress resume at the next start."""

    async def submit_new(self) -> int:
        """Hand every new ticket not yet handed over to the workers; returns how many."""

    async def deliver(
        self,
        decision: Decision,
        *,
        decided_ticket: int | None = None,
        legacy_wait: bool | None = None,
    ) -> None:
        """Send a staff decision to the run that waits for it, wherever it runs.
        ``decided_ticket``: the ticket of the decision's approval, which the caller knows
        is decided (it claimed it); ``legacy_wait``: whether the run waits in a workflow
        of the previous layout, if the caller looked (``None``: the delivery reads them)."""


@dataclass(slots=True)
class Desk:
    """The desk's services: a database, a model, and its settings."""

    db: Database
    client: ChatClient
    triage_client: ChatClient | None = None
    """A separate model for triage (default: ``client``)."""
    approval_ttl: timedelta = timedelta(hours=24)
    detector: Detector = flag_instructions
    on_change: list[Callable[[int], None]] = field(default_factory=list)
    """Called with a ticket id whenever its state changes (wakes live views)."""
    listeners: list[Listener] = field(default_factory=list)
    """Extra listeners of every agent run (the terminal demo prints with one)."""
    runs: TicketRuns | None = None
    """Durable mode: tickets and decisions go to workers (``None``: run them here)."""
    helpdesk: HelpdeskSettings = field(default_factory=HelpdeskSettings)
    """Conversations and inbox settings (reopen window, waiting-time target)."""
    mailer: Mailer | None = None
    """Where notifications go (``None``: they wait in the outbox, unsent)."""
    pages: PagesFirst = field(default_factory=PagesFirst)
    """The web app's requests in flight, which durable steps give way to
    (:mod:`tether_desk.priority`; counted by the console when it runs in this process)."""

    def changed(self, ticket_id: int) -> None:
        """Tell listeners that ``ticket_id`` changed."""
        for callback in self.on_change:
            callback(ticket_id)


def new_run_id() -> str:
    """A fresh run id."""
    return secrets.token_hex(12)


def load_scope(db: Database, ticket_id: int) -> TicketScope:
    """The ticket's scope: its order from the account, its text."""
    with db.read_connection() as s:
        return scope_in(s, ticket_id)


def scope_in(connection: Connection, ticket_id: int) -> TicketScope:
    """:func:`load_scope` in a transaction already open."""
    rows = connection.execute(_SCOPE, {"ticket_id_": ticket_id}).all()
    if not rows:
        raise NotFound(f"There is no ticket {ticket_id}.")
    messages = newest_within_cap([r[7:] for r in rows if r[7] is not None])
    text = joined_text(messages)  # the whole thread's customer messages
    seen = messages[-1][0] if messages else 0  # where follow_up looks from
    return TicketScope(*rows[0][:5], text or rows[0][5], seen=seen, round=rows[0][6])


def set_status(db: Database, ticket_id: int, status: str, **values: object) -> None:
    with db.write_connection() as s:
        set_ticket(s, ticket_id, status=status, **values)


def _claim(db: Database, ticket_id: int) -> bool:
    with db.write_connection() as s:
        done = s.execute(_CLAIM, {"ticket_id_": ticket_id, "updated_at": utcnow()})
        return bool(done.rowcount)


def ticket_status(db: Database, ticket_id: int) -> str:
    """The ticket's status now."""
    with db.read_connection() as s:
        status = s.scalar(_STATUS, {"ticket_id_": ticket_id})
    if status is None:
        raise NotFound(f"There is no ticket {ticket_id}.")
    return status


async def process_ticket(desk: Desk, ticket_id: int) -> str:
    """Run the pipeline on a new ticket once; returns the ticket's status afterwards."""
    if not _claim(desk.db, ticket_id):
        return ticket_status(desk.db, ticket_id)
    desk.changed(ticket_id)
    scope: TicketScope | None = None
    try:
        scope = load_scope(desk.db, ticket_id)
        category = await _triage(desk, scope)
        if category == "tracking":
            _answer_tracking(desk.db, scope)
        elif category == "refund":
            await _run_refund_agent(desk, scope)
        else:
            set_status(desk.db, ticket_id, "needs_human")
    except Exception:
        log.exception("ticket %s failed in the pipeline", ticket_id)
        set_status(desk.db, ticket_id, "failed")
    if scope is not None:
        follow_up(desk.db, scope)  # the customer wrote meanwhile: the next round, now
    desk.changed(ticket_id)
    return ticket_status(desk.db, ticket_id)


async def _triage(desk: Desk, scope: TicketScope) -> str:
    recorder = start_triage(RunRecorder(desk.db, new_run_id(), scope.ticket_id, "triage"))
    result = await classify(desk.triage_client or desk.client, scope.subject, scope.body)
    note_triage(recorder, result)
    record_triage(recorder, scope, result)
    return result.category


def start_triage(recorder: RunRecorder) -> RunRecorder:
    """The triage run's recorder, started, with the model request noted (and written if
    the model takes its time: the run shows in the console while it classifies)."""
    note_triage_request(recorder)
    recorder.flush_soon()
    return recorder


def note_triage_request(recorder: RunRecorder) -> None:
    """Start the triage run's trace: its row and its model request, not written yet."""
    recorder.start()
    recorder.note("model_request", {"turn": 1, "messages": 1})


def note_triage(recorder: RunRecorder, result: TriageResult) -> None:
    """Note the triage's result in its run's trace."""
    recorder.note(
        "triage",
        {
            "category": result.category,
            "replies": [r[:500] for r in result.replies],
            "error": result.error,
        },
    )


def record_triage(recorder: RunRecorder, scope: TicketScope, result: TriageResult) -> None:
    """Write the triage run's outcome and the ticket's category (one transaction)."""
    recorder.finish(
        *triage_outcome(result),
        result.usage,
        lambda c: c.execute(*category_statement(scope, result)),
    )


def triage_outcome(result: TriageResult) -> tuple[str, str]:
    """The triage run's status and reason."""
    return ("completed" if not result.error else "fallback", result.error or result.category)


def category_statement(scope: TicketScope, result: TriageResult) -> tuple[Executable, Any]:
    """The ticket's category as the triage found it: a statement and its parameters."""
    return _TRIAGED, {"ticket_id_": scope.ticket_id, "category_": result.category}


def _answer_tracking(db: Database, scope: TicketScope) -> None:
    """Answer from the order's status (once: a second call finds the answer sent)."""
    with db.read_connection() as s:
        view = order_view(s, scope.order_id)
    status = STATUS_LABELS.get(view.status, view.status)
    text = f"Bonjour {scope.customer_name}, votre commande {view.number} est {status}."
    now = utcnow()
    with db.write() as s:
        if s.scalar(select(Draft.id).where(Draft.ticket_id == scope.ticket_id)) is not None:
            return
        s.add(Draft(ticket_id=scope.ticket_id, body=text, author="desk", sent_at=now))
        message = Message(ticket_id=scope.ticket_id, kind="staff", body=text, created_at=now)
        s.add(message)
        s.flush()
        queue_reply(s.connection(), scope.ticket_id, message.id, text)
        s.execute(
            update(Ticket)
            .where(Ticket.id == scope.ticket_id)
            .values(status="answered", reply=text, replied_at=now, updated_at=now)
        )


async def _run_refund_agent(desk: Desk, scope: TicketScope) -> None:
    recorder = RunRecorder(desk.db, new_run_id(), scope.ticket_id, "refund").start()
    agent = refund_agent(desk.client, desk.db, scope, [recorder, *desk.listeners])
    result = await agent.run(REFUND_PROMPT, run_id=recorder.run_id)
    await settle(desk, scope, recorder, result)


def _screen_pending(
    db: Database, scope: TicketScope, pending: tuple[PendingApproval, ...]
) -> tuple[PendingApproval | None, list[Decision], OrderView]:
    """Refuse in code what no person should be asked; keep at most one for staff."""
    with db.read_connection() as s:
        view, waiting = order_view_and_waiting(s, scope.order_id, scope.ticket_id)
    chosen: PendingApproval | None = None
    refused: list[Decision] = []
    for p in pending:
        amount = p.arguments.get("amount")
        cents = round(amount * 100) if isinstance(amount, int | float) else 0
        if p.tool != "propose_refund":
            refused.append(p.deny("only refunds are approved here"))
        elif not 0 < cents <= view.remaining_cents:
            refused.append(
                p.deny(
                    f"the amount must be above 0 and at most the remaining "
                    f"{format_cents(view.remaining_cents)} EUR"
                )
            )
        elif chosen is not None or waiting is not None:
            refused.append(p.deny("only one refund proposal per ticket can wait for a decision"))
        else:
            chosen = p
    return chosen, refused, view


async def settle(desk: Desk, scope: TicketScope, recorder: RunRecorder, result: RunResult) -> None:
    """Take a run's result to its next state: a stored approval, a draft, or a failure."""
    for _ in range(MAX_SETTLE_ROUNDS):
        state = result.state
        if result.outcome.kind != "awaiting_approval" or state is None:
            break
        chosen, refused, view = _screen_pending(desk.db, scope, state.pending)
        if refused:
            for d in refused:
                recorder.note("refused_by_desk", {"call_id": d.call_id, "reason": d.reason})
            agent = refund_agent(desk.client, desk.db, scope, [recorder, *desk.listeners])
            result = await agent.resume(state, refused, store=desk.db.state_store())
            continue
        if chosen is not None:
            reason, usage = result.outcome.reason, result.usage
            store_approval(desk, scope, recorder, state, chosen, reason, usage, view=view)
            return
    _finish_run(desk.db, scope, recorder, result)


def store_approval(
    desk: Desk,
    scope: TicketScope,
    recorder: RunRecorder,
    state: RunState,
    p: PendingApproval,
    reason: str,
    usage: Usage,
    *,
    view: OrderView | None = None,
    once: bool = False,
    context: dict[str, Any] | None = None,
) -> int | None:
    """Store in one transaction the run's ``state``, the approval of its pending call
    ``p``, the ticket awaiting it, and the trace with the run's outcome (``reason``,
    ``usage``): all or none. Returns the approval's id, or ``None`` if another proposal
    already waits for the ticket (the ticket failed) or staff answered the ticket meanwhile
    (nothing is stored: the agent never moves a ticket out of ``answered``). ``view``: the
    order as screened (default: read now); ``once``: keep an approval already stored for
    this run's call (a durable step run again) instead of storing a second one;
    ``context``: more of the approval's context (kept with the row)."""
    if view is None:
        with desk.db.read_connection() as c:
            view = order_view(c, scope.order_id)
    values = approval_values(desk, scope, state, p, view)
    if context:
        values["context"] = {**values["context"], **context}
    states = desk.db.state_store()
    stored: list[int] = []

    def store(c: Connection) -> None:
        states.save_in(c, state)
        approval_id = approval_of_call(c, state.run_id, p.call_id) if once else None
        if approval_id is None:
            approval_id = insert_approval(c, values)
        if not set_ticket(c, scope.ticket_id, status="awaiting_approval"):
            raise _Answered  # staff replied while the agent ran: their reply stands
        cents = values["amount_cents"]
        queue_approval(c, approval_id, scope.ticket_id, cents, order_number=scope.order_number)
        note_approval(recorder, approval_id, values)
        stored.append(approval_id)

    try:
        recorder.finish("awaiting_approval", reason, usage, store)
    except IntegrityError:  # another proposal already waits for this ticket
        why = "a second refund proposal could not be stored"
        failed = partial(set_ticket, ticket_id=scope.ticket_id, status="failed")
        recorder.finish("failed", why, usage, failed)
        return None
    except _Answered:
        recorder.note("dropped_by_desk", {"call_id": p.call_id, "reason": ANSWERED_FIRST})
        recorder.finish("cancelled", ANSWERED_FIRST, usage)
        return None
    return stored[0]


ANSWERED_FIRST = "staff answered the ticket while the agent ran; its proposal was dropped"


class _Answered(Exception):
    """The ticket was answered before the agent's proposal could be stored."""


def approval_values(
    desk: Desk, scope: TicketScope, state: RunState, p: PendingApproval, view: OrderView
) -> dict[str, Any]:
    """The approval row to store for the pending call ``p`` of the run in ``state``
    (friction from the amount, what remains and the ticket's flagged passages)."""
    amount = p.arguments.get("amount")
    cents = round(float(amount) * 100) if isinstance(amount, int | float) else 0
    flags = desk.detector(scope.body, scope.order_number)
    context = p.context if isinstance(p.context, dict) else {}
    return {
        "ticket_id": scope.ticket_id,
        "run_id": state.run_id,
        "call_id": p.call_id,
        "tool": p.tool,
        "arguments": dict(p.arguments),
        "arguments_hash": p.arguments_hash,
        "amount_cents": cents,
        "context": {**context, "flags": len(flags), "seen": scope.seen},
        "state_version": state.version,
        "typed_amount_required": bool(friction_for(cents, view.remaining_cents, flags)),
        "expires_at": utcnow() + desk.approval_ttl,
    }


def note_approval(recorder: RunRecorder, approval_id: int, values: dict[str, Any]) -> None:
    """Note in the trace that the approval ``approval_id`` (of ``values``) waits for staff."""
    recorder.note(
        "approval_requested",
        {
            "approval": approval_id,
            "call_id": values["call_id"],
            "amount": format_cents(values["amount_cents"]),
            "typed_amount": values["typed_amount_required"],
        },
    )


def _finish_run(db: Database, scope: TicketScope, recorder: RunRecorder, result: RunResult) -> None:
    """Record the run's end and the ticket's next state in one transaction: the agent's
    draft for staff, or a failure for a person to pick up."""
    if result.outcome.completed and result.output.strip():
        text = result.output.strip()[:MAX_BODY]

        def draft(c: Connection) -> None:
            agent_draft(c, scope.ticket_id, text)
    else:

        def draft(c: Connection) -> None:
            set_ticket(c, scope.ticket_id, status="failed")

    recorder.finish(result.outcome.kind, result.outcome.reason, result.usage, draft)
