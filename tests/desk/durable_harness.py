"""Crash injection for the durable desk: one worker, every ticket stopped at its own step
boundary, one SIGKILL, one restart.

Each ticket of the scenario has one boundary of the flow (see
:mod:`tether_desk.durable.boundaries`). The worker (``durable_worker.py``) runs all of
them at once and each run stops at its boundary; the test, playing the web console in
its own process, approves refunds as they wait (except the one it keeps waiting). Once
every run is at its boundary and that one waits, the worker is SIGKILLed: every run dies
exactly at its boundary, together. The waiting refund is approved while no worker is
alive, then the worker restarts under the same executor id and every run finishes.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers import staff_id
from sqlalchemy import insert, select

from tether_desk.db import Database
from tether_desk.decisions import claim_decision, resume
from tether_desk.durable import DurableDesk, DurableSettings, workflow_id
from tether_desk.errors import RuleViolation
from tether_desk.models import Approval, Customer, Order, Ticket
from tether_desk.money import format_cents
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed

WORKER = Path(__file__).with_name("durable_worker.py")
WAITING = "approval.waiting"
"""Not a boundary of the code: the test kills the worker while this ticket's refund waits
for its decision, and sends the decision while no worker is alive."""
HELD = (WAITING, "ticket.done")
"""Boundaries whose ticket's approval is not decided before the kill. The ``ticket.done``
one is decided only after the restarted worker has finished the ticket's workflow, which
replays the agent's run while the approval it asked for waits (a ruling that read the
database again, instead of the log, would now refuse the call)."""
FINAL = {"draft_ready", "answered", "needs_human", "failed"}


@dataclass
class Crash:
    """What happened, for the test's checks."""

    workdir: Path
    points: dict[int, str]
    kinds: dict[int, str]
    shared_order: int
    staff: int
    kills: int = 0
    killed_at: float = 0.0
    """When the worker was SIGKILLed (``time.time()``)."""
    starts: int = 0
    approved_while_dead: list[int] = field(default_factory=list)


def prepare(db: Database, refund_points: list[str]) -> tuple[dict[int, str], dict[int, str], int]:
    """Seeded accounts, then one refund ticket per point on an order of its own (50.00
    paid, 20.00 asked), two refund tickets asking 30.00 each on one shared order of 50.00,
    a tracking and an "other" ticket. Returns (points, kinds, shared order's id)."""
    seed(db, tickets=False)
    refund = "Mon colis est arrive abime, je demande {} EUR."
    with db.write() as s:
        customer = s.scalar(select(Customer.id).where(Customer.email.like("marie%")))

        def new_order(number: str) -> int:
            values = {
                "number": number,
                "customer_id": customer,
                "status": "shipped",
                "amount_paid_cents": 5000,
                "shipping_address": "12 rue des Lilas, 69003 Lyon",
                "payment_method": "card **** 4242",
            }
            return int(s.execute(insert(Order).values(values).returning(Order.id)).scalar_one())

        specs = [(p, "refund", 2000) for p in refund_points]
        specs += [("tool.returned:2:propose_refund", "shared", 3000)]
        specs += [("approval.received", "shared", 3000)]
        specs += [("answer.returned", "tracking", 0), ("needs_human.returned", "other", 0)]
        shared = new_order("C-7000")
        points: dict[int, str] = {}
        kinds: dict[int, str] = {}
        for i, (point, kind, cents) in enumerate(specs):
            order = shared if kind == "shared" else new_order(f"C-{6000 + i:04d}")
            body = {
                "tracking": "Bonjour, ou en est ma commande ? Merci.",
                "other": "Puis-je changer l'adresse de livraison ?",
            }.get(kind, refund.format(format_cents(cents)))
            tid = s.execute(
                insert(Ticket)
                .values(customer_id=customer, order_id=order, subject="Ticket", body=body)
                .returning(Ticket.id)
            ).scalar_one()
            points[tid], kinds[tid] = point, kind
    return points, kinds, shared


async def finished(runs: DurableDesk, ticket_id: int) -> bool:
    """Whether the ticket's own workflow has ended."""
    wid = workflow_id(ticket_id)
    found = await asyncio.to_thread(runs.client.list_workflows, workflow_ids=[wid])
    return bool(found) and found[0].status == "SUCCESS"


async def all_ended(runs: DurableDesk) -> bool:
    """Whether every workflow in the log has ended (a draft is written inside the last
    step: the step is logged and its workflow returns after it; a worker stopped before
    that would leave the run pending)."""
    found = await asyncio.to_thread(runs.client.list_workflows, load_input=False, load_output=False)
    return all(w.status in ("SUCCESS", "ERROR") for w in found)


def statuses(db: Database) -> dict[int, str]:
    with db.read_connection() as c:
        return {int(i): str(s) for i, s in c.execute(select(Ticket.id, Ticket.status))}


def pending(db: Database) -> list[tuple[int, int, int]]:
    """(approval id, ticket id, cents) of every pending approval."""
    with db.read_connection() as c:
        rows = c.execute(
            select(Approval.id, Approval.ticket_id, Approval.amount_cents).where(
                Approval.status == "pending"
            )
        )
        return [(int(a), int(t), int(c_)) for a, t, c_ in rows]


async def crash_everywhere(
    desk_url: str, workdir: Path, refund_points: list[str], *, deadline: float = 300
) -> Crash:
    """Run the scenario on the desk database at ``desk_url`` (see the module doc)."""
    db = Database(desk_url)
    db.migrate()
    points, kinds, shared = prepare(db, refund_points)
    waiting = next(t for t, p in points.items() if p == WAITING)
    held = {t for t, p in points.items() if p in HELD}
    crash = Crash(workdir, points, kinds, shared, staff_id(db))
    marks = workdir / "marks"
    marks.mkdir()
    log = workdir / "boundaries.sqlite"
    with sqlite3.connect(log) as c:
        c.execute("CREATE TABLE boundaries (workflow TEXT, ticket INT, name TEXT, at REAL)")
    env = {
        **os.environ,
        "DESK_CRASH": json.dumps({"points": points, "marks": str(marks), "log": str(log)}),
    }
    console = Desk(db, DeskScriptedModel())  # the web console's side: no DBOS runtime
    runs = DurableDesk(console, DurableSettings(), process=False)
    await runs.start()

    def start() -> subprocess.Popen[bytes]:
        out = open(workdir / f"worker-{crash.starts}.log", "wb")  # noqa: SIM115
        crash.starts += 1
        return subprocess.Popen(
            [sys.executable, str(WORKER), desk_url, "w1"], env=env, stdout=out, stderr=out
        )

    async def approve(approval_id: int, ticket_id: int, cents: int) -> None:
        try:
            claimed = await asyncio.to_thread(
                claim_decision,
                console,
                approval_id,
                crash.staff,
                approve=True,
                typed_amount=format_cents(cents),
            )
        except RuleViolation as exc:  # the ledger could not pay it: staff deny it
            claimed = await asyncio.to_thread(
                claim_decision, console, approval_id, crash.staff, approve=False, reason=str(exc)
            )
        await resume(console, claimed)  # sends the decision to the run that waits

    shared = sorted((points[t], t) for t, k in kinds.items() if k == "shared")
    first_shared, second_shared = shared[1][1], shared[0][1]  # tool.returned, approval.received

    def ready(tid: int) -> bool:
        """The shared order's second proposal is decided after its first was approved."""
        return tid != second_shared or first_shared in decided

    def logs() -> str:
        return "\n".join(p.read_text()[-3000:] for p in sorted(workdir.glob("worker-*.log")))

    worker = start()
    approved: set[int] = set()
    decided: set[int] = set()
    end = time.monotonic() + deadline
    try:
        await runs.submit_new()
        while True:  # every run goes to its boundary; the kept refund waits
            if worker.poll() is not None:
                raise AssertionError(f"the worker exited ({worker.returncode}):\n{logs()}")
            waits = await asyncio.to_thread(pending, db)
            for aid, tid, cents in waits:
                if tid not in held and aid not in approved and ready(tid):
                    await approve(aid, tid, cents)
                    approved.add(aid)
                    decided.add(tid)
            parked = {int(m.name) for m in marks.iterdir()}
            if {t for t in points if t != waiting} <= parked and held <= {t for _, t, _ in waits}:
                break
            if time.monotonic() > end:
                raise AssertionError(f"runs never reached {set(points) - parked}:\n{logs()}")
            await asyncio.sleep(0.05)
        crash.killed_at = time.time()
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        crash.kills += 1
        for aid, tid, cents in await asyncio.to_thread(pending, db):  # no worker is alive
            if tid == waiting:
                await approve(aid, tid, cents)
                approved.add(aid)
                crash.approved_while_dead.append(tid)
        worker = start()
        while True:  # the restarted worker finishes every run
            if worker.poll() is not None:
                raise AssertionError(f"the worker exited ({worker.returncode}):\n{logs()}")
            for aid, tid, cents in await asyncio.to_thread(pending, db):
                if tid in held and not await finished(runs, tid):
                    continue
                if aid not in approved:
                    await approve(aid, tid, cents)
                    approved.add(aid)
            now = await asyncio.to_thread(statuses, db)
            if all(now[t] in FINAL for t in points):
                break
            if time.monotonic() > end:
                raise AssertionError(f"not finished: {now}\n{logs()}")
            await asyncio.sleep(0.05)
        while not await all_ended(runs):  # each workflow returns after its last step
            if worker.poll() is not None:
                raise AssertionError(f"the worker exited ({worker.returncode}):\n{logs()}")
            if time.monotonic() > end:
                raise AssertionError(f"workflows left pending:\n{logs()}")
            await asyncio.sleep(0.05)
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(worker.wait, 30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        await runs.stop()
        db.dispose()
    return crash
