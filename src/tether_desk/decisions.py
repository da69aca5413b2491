"""Staff decisions on pending refunds, and approvals that expire.

A decision is taken in two steps. :func:`claim_decision` checks it (typed amount when the
screen demands it, the call's arguments hash, expiry) and moves the approval from
``pending`` to its outcome with one conditional update: of two concurrent decisions only
the first changes the row, so the stored run state is resumed once. :func:`resume` then
continues the run with a decision bound to the run, the call id and the arguments hash;
the refund it runs uses the call's id in its run as idempotency key, so even a repeated
resume refunds once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, bindparam, select, update

from tether.errors import StateClaimed, StateError
from tether.messages import Usage
from tether.outcomes import Decision
from tether_desk.agent import refund_agent
from tether_desk.approvals import owed
from tether_desk.clock import utcnow
from tether_desk.errors import Conflict, InvalidInput, NotFound, RuleViolation
from tether_desk.models import Approval, Order, Run, Ticket
from tether_desk.money import format_cents, parse_amount
from tether_desk.pipeline import Desk, load_scope, set_status, settle
from tether_desk.thread import follow_up
from tether_desk.thread_store import decision_event
from tether_desk.trace import RunRecorder

log = logging.getLogger("tether_desk")
MAX_REASON = 500
DENIED = "refused by staff"
_FOR_DECISION = (
    select(
        Approval.id,
        Approval.ticket_id,
        Approval.run_id,
        Approval.call_id,
        Approval.arguments_hash,
        Approval.amount_cents,
        Approval.state_version,
        Approval.status,
        Approval.typed_amount_required,
        Approval.expires_at,
        Approval.context,
        Ticket.order_id,
        Ticket.status.label("ticket_status"),
        Order.number,
        Order.amount_paid_cents,
    )
    .join(Ticket, Ticket.id == Approval.ticket_id)
    .join(Order, Order.id == Ticket.order_id)
    .where(Approval.id == bindparam("approval_id"))
    .with_for_update(of=Order)  # PostgreSQL: decisions on one order, one at a time
)
_PENDING = update(Approval).where(
    Approval.id == bindparam("approval_id"), Approval.status == "pending"
)
_DECIDE = _PENDING.values(
    status=bindparam("status_"),
    decided_at=bindparam("now_"),
    decided_by=bindparam("staff_id_"),
    reason=bindparam("reason_"),
    approved_cents=bindparam("approved_cents_"),
)
_EXPIRE = _PENDING.values(status="expired", decided_at=bindparam("now_"), reason="expired")


@dataclass(frozen=True, slots=True)
class Claimed:
    """A decision that won its approval: what :func:`resume` needs."""

    approval_id: int
    ticket_id: int
    run_id: str
    state_version: int
    decision: Decision
    staff_id: int
    legacy_wait: bool | None = None
    """Whether the run waits for it in a workflow of the previous layout, as the claim
    found (``None``: not looked up; the delivery looks)."""
    ticket_status: str | None = None
    """The ticket's status as the claim read it (``None``: not read). A durable desk's
    :func:`resume` returns it: the decision is applied later, by a worker."""


def claim_decision(
    desk: Desk,
    approval_id: int,
    staff_id: int,
    *,
    approve: bool,
    typed_amount: str = "",
    reason: str = "",
    arguments_hash: str | None = None,
    approve_cents: int | None = None,
) -> Claimed:
    """Check and record a decision; raises a :class:`~tether_desk.errors.DeskError`
    saying what to do when it cannot be taken. ``approve_cents``: approve less than was
    proposed (the refund made is this amount). An approval is refused before it is
    recorded if the ledger could not pay it (what was refunded and approved elsewhere
    counts); the amount must be typed when the screen demands it and for any approval
    after the first on the same order or ticket."""
    from tether_desk.operations.attention import refuse_undeliverable

    reason = reason.strip()[:MAX_REASON]
    now = utcnow()
    status = "approved" if approve else "denied"
    with desk.db.write_connection() as c:  # read, check and claim under the write lock
        a = c.execute(_FOR_DECISION, {"approval_id": approval_id}).one_or_none()
        if a is None:
            raise NotFound(f"There is no approval {approval_id}.")
        if a.status != "pending":
            raise Conflict(f"This approval was already {a.status}; nothing was changed.")
        if arguments_hash is not None and arguments_hash != a.arguments_hash:
            raise Conflict("This screen shows another call than the one waiting; reload it.")
        expired = now >= a.expires_at
        if expired:
            c.execute(_EXPIRE, {"approval_id": a.id, "now_": now})
        else:
            approved = None
            if approve:
                approved = _check_approval(c, a, typed_amount, approve_cents)
            # a run no process can resume refuses it (the durable log, read under the lock)
            legacy_wait = refuse_undeliverable(desk, a.run_id, a.call_id, a.context)
            won = c.execute(
                _DECIDE,
                {
                    "approval_id": a.id,
                    "status_": status,
                    "now_": now,
                    "staff_id_": staff_id,
                    "reason_": reason,
                    "approved_cents_": approved if approved != a.amount_cents else None,
                },
            ).rowcount
            if won:
                decision_event(c, a.ticket_id, staff_id, status, a.amount_cents)
    if expired:
        raise Conflict("This approval expired; the refund was not made. Ask the agent again.")
    if not won:
        raise Conflict("Someone decided this approval first; nothing was changed.")
    why = "" if approve else (reason or DENIED)
    decision = Decision(a.call_id, a.arguments_hash, approve, why, a.run_id)
    return Claimed(
        a.id,
        a.ticket_id,
        a.run_id,
        a.state_version,
        decision,
        staff_id,
        legacy_wait,
        a.ticket_status,
    )


def _check_approval(c: Connection, a: Any, typed_amount: str, approve_cents: int | None) -> int:
    """The amount to approve, after every check that must pass before it is recorded."""
    cents = a.amount_cents if approve_cents is None else approve_cents
    if not 0 < cents <= a.amount_cents:
        raise InvalidInput(
            f"Approve an amount above 0 and at most the {format_cents(a.amount_cents)} EUR "
            "proposed; nothing was refunded."
        )
    # read after the order's lock, in a statement of its own (see refunds.py)
    committed = owed(c, a.id, a.ticket_id, a.order_id)
    refunded = committed.refunded_cents
    remaining = a.amount_paid_cents - refunded - committed.approved_unpaid_cents
    if cents > remaining:
        raise RuleViolation(
            f"Only {format_cents(max(remaining, 0))} EUR can still be refunded on {a.number} "
            f"(paid {format_cents(a.amount_paid_cents)}, refunded {format_cents(refunded)}, "
            f"approved and not yet paid {format_cents(committed.approved_unpaid_cents)}); "
            "approve a lower amount or deny. Nothing was refunded."
        )
    if a.typed_amount_required or committed.prior_approvals:
        _check_typed_amount(typed_amount, cents)
    return cents


def _check_typed_amount(typed_amount: str, amount_cents: int) -> None:
    if not typed_amount.strip():
        amount = format_cents(amount_cents)
        raise InvalidInput(f"Type the amount ({amount}) to confirm this refund.")
    if parse_amount(typed_amount) != amount_cents:
        raise InvalidInput(
            f"The amount typed does not match the refund ({format_cents(amount_cents)} EUR); "
            "nothing was refunded."
        )


def decision_of(a: Approval) -> Decision:
    """The runtime's decision for a decided approval: bound to its run, call and arguments."""
    approved = a.status == "approved"
    reason = "" if approved else (a.reason or DENIED)
    return Decision(a.call_id, a.arguments_hash, approved, reason, a.run_id)


async def resume(desk: Desk, claimed: Claimed, *, replay: bool = False) -> str:
    """Continue the run after a claimed decision; returns the ticket's status.

    The state comes from the runtime's state store and is claimed there, so it is resumed
    once: a second resume of the same state changes nothing. ``replay`` (recovery after a
    stop) resumes without the claim when the stopped process still holds it; the ledger's
    key keeps the refund to one. A state that does not verify fails the ticket, visibly.
    On a durable desk the run waits on a worker: the decision is sent to it (again, for
    ``replay``: a run applies it once)."""
    if desk.runs is not None:
        await desk.runs.deliver(
            claimed.decision, decided_ticket=claimed.ticket_id, legacy_wait=claimed.legacy_wait
        )
        desk.changed(claimed.ticket_id)
        if claimed.ticket_status is not None:  # what the claim read: the run goes on later
            return claimed.ticket_status
        from tether_desk.pipeline import ticket_status

        return ticket_status(desk.db, claimed.ticket_id)
    store = desk.db.state_store()
    with desk.db.read_connection() as c:
        state = store.load_in(c, claimed.run_id)
    if state is None or state.version != claimed.state_version:
        log.warning("approval %s: its run state is gone or newer", claimed.approval_id)
        from tether_desk.pipeline import ticket_status

        return ticket_status(desk.db, claimed.ticket_id)
    scope = replace(load_scope(desk.db, claimed.ticket_id), seen=_seen(desk, claimed.approval_id))
    recorder = RunRecorder(desk.db, claimed.run_id, claimed.ticket_id, "refund").start(resumed=True)
    recorder.note(
        "decision",
        {
            "approval": claimed.approval_id,
            "approved": claimed.decision.approved,
            "reason": claimed.decision.reason,
            "staff": claimed.staff_id,
        },
    )
    approver = claimed.staff_id if claimed.decision.approved else None
    agent = refund_agent(
        desk.client, desk.db, scope, [recorder, *desk.listeners], approved_by=approver
    )
    try:
        try:
            result = await agent.resume(state, [claimed.decision], store=store)
        except StateClaimed:
            if not replay:
                raise
            # the stopped process's claim has not expired yet: the ledger's key keeps the
            # refund to one
            result = await agent.resume(state, [claimed.decision])
        await settle(desk, scope, recorder, result)
        follow_up(desk.db, scope)  # the customer wrote while it waited: the next round
    except StateClaimed as exc:  # resumed by someone else: nothing to do
        log.info("approval %s: %s", claimed.approval_id, exc)
        recorder.flush()
    except StateError as exc:  # a stored state that does not verify: never run, say so
        log.error("approval %s: its run state was refused: %s", claimed.approval_id, exc)
        recorder.finish("failed", f"the stored run state was refused: {exc}", Usage())
        set_status(desk.db, claimed.ticket_id, "failed")
    except Exception:
        log.exception("resuming the run of approval %s failed", claimed.approval_id)
        recorder.finish("failed", "the run could not be resumed", Usage())
        set_status(desk.db, claimed.ticket_id, "failed")
    desk.changed(claimed.ticket_id)
    from tether_desk.pipeline import ticket_status

    return ticket_status(desk.db, claimed.ticket_id)


def _seen(desk: Desk, approval_id: int) -> int | None:
    """The newest customer message the proposal's round had read (stored with it)."""
    with desk.db.read_connection() as c:
        context = c.scalar(select(Approval.context).where(Approval.id == approval_id))
    seen = context.get("seen") if isinstance(context, dict) else None
    return int(seen) if isinstance(seen, int) else None


async def decide(
    desk: Desk,
    approval_id: int,
    staff_id: int,
    *,
    approve: bool,
    typed_amount: str = "",
    reason: str = "",
    arguments_hash: str | None = None,
    approve_cents: int | None = None,
) -> str:
    """Claim a decision and resume the run; returns the ticket's status."""
    claimed = claim_decision(
        desk,
        approval_id,
        staff_id,
        approve=approve,
        typed_amount=typed_amount,
        reason=reason,
        arguments_hash=arguments_hash,
        approve_cents=approve_cents,
    )
    return await resume(desk, claimed)


async def recover_decided(desk: Desk) -> int:
    """Resume the runs whose approval was decided but whose run never continued (the
    process stopped in between). The ledger's idempotency key makes this safe even if the
    refund was made before the stop. Returns how many runs were resumed."""
    with desk.db.read() as s:
        stuck = (
            s.execute(
                select(Approval)
                .join(Run, Run.id == Approval.run_id)
                .where(
                    Approval.status.in_(("approved", "denied")), Run.status == "awaiting_approval"
                )
            )
            .scalars()
            .all()
        )
        for a in stuck:
            s.expunge(a)
    for a in stuck:
        claimed = Claimed(
            a.id, a.ticket_id, a.run_id, a.state_version, decision_of(a), a.decided_by or 0
        )
        await resume(desk, claimed, replay=True)
    return len(stuck)


def expire(desk: Desk, approval_id: int) -> bool:
    """Mark a pending approval expired (once); True if this call did it."""
    with desk.db.write_connection() as c:
        return bool(c.execute(_EXPIRE, {"approval_id": approval_id, "now_": utcnow()}).rowcount)


async def expire_due(desk: Desk) -> int:
    """Expire every pending approval past its time and let each run finish with a
    refusal (the model drafts a reply; no refund is made). Returns how many."""
    with desk.db.read() as s:
        due = s.scalars(
            select(Approval).where(Approval.status == "pending", Approval.expires_at <= utcnow())
        ).all()
        for a in due:
            s.expunge(a)
    count = 0
    for a in due:
        if not expire(desk, a.id):
            continue
        count += 1
        denial = Decision(a.call_id, a.arguments_hash, False, "the approval expired", a.run_id)
        await resume(desk, Claimed(a.id, a.ticket_id, a.run_id, a.state_version, denial, 0))
    return count
