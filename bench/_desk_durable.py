"""The durable side of ``bench/desk.py``: what ``tether serve`` runs by default (a
:class:`~tether_desk.durable.DurableDesk` on SQLite, its queue and workflows in this
process) fed a batch of refund tickets at once, with this process also playing the
console: it hands the new tickets to the queue, approves each refund as soon as it
waits and sends each draft, as staff would. Prints JSON (see ``_desk_driver.py``).

CPU per ticket is the whole process's CPU time over the batch divided by its tickets:
DBOS's threads (the queue's polling, the waits' polling), the workflows, the console's
side; nothing is left out. ``profile`` gives every thread its own profiler and groups
the time by where the code lives.
"""

from __future__ import annotations

import asyncio
import collections
import cProfile
import os
import pstats
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event, select

from _desk_driver import TEXT, count_statements, group
from tether_desk.db import Database, sqlite_url
from tether_desk.decisions import claim_decision, resume
from tether_desk.models import Approval, Order, Staff, Ticket
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed
from tether_desk.tickets import open_ticket, send_reply

CONSOLE_EVERY = 0.05
"""Seconds between two looks of the console's side at waiting approvals and drafts."""

_PENDING = select(Approval.id).where(Approval.status == "pending")
_DRAFTS = select(Ticket.id).where(Ticket.status == "draft_ready", Ticket.replied_at.is_(None))
_REPLIED = select(Ticket.id).where(Ticket.replied_at.is_not(None))


class Threads:
    """A profiler in every thread started from now on, and in this one."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []

    def _start(self, *_: Any) -> None:
        p = cProfile.Profile(time.thread_time)
        self.profiles.append(p)
        p.enable()

    def __enter__(self) -> Threads:
        threading.setprofile(self._start)
        self._start()
        return self

    def __exit__(self, *_: Any) -> None:
        threading.setprofile(None)  # type: ignore[arg-type]
        for p in self.profiles:
            p.disable()

    def clear(self) -> None:
        for p in self.profiles:
            p.clear()

    def stats(self) -> pstats.Stats:
        stats = pstats.Stats(self.profiles[0])
        for p in self.profiles[1:]:
            p.create_stats()
            if p.stats:  # type: ignore[attr-defined]
                stats.add(p)
        return stats


async def _console(desk: Desk, staff: int, tickets: set[int]) -> None:
    """Approve what waits, send what is drafted, until every ticket is answered."""
    db = desk.db
    replied: set[int] = set()
    if desk.runs is not None:  # the console's worker, kicked as the tickets open
        await desk.runs.submit_new()
    while not tickets <= replied:
        with db.read_connection() as c:
            waiting = c.scalars(_PENDING).all()
        for approval in waiting:
            await resume(desk, claim_decision(desk, approval, staff, approve=True))
        with db.read_connection() as c:
            drafted = c.scalars(_DRAFTS).all()
        for ticket in drafted:
            send_reply(db, ticket, staff)
            replied.add(ticket)
        await asyncio.sleep(CONSOLE_EVERY)


async def _batch(desk: Desk, customer: int, numbers: list[str], staff: int) -> set[int]:
    tickets = {open_ticket(desk.db, customer, n, "Colis abime", TEXT) for n in numbers}
    await _console(desk, staff, tickets)
    return tickets


async def durable(n: int, mode: str, warmup: int, add_orders: Any) -> dict[str, Any]:
    from tether_desk.durable import DurableDesk, DurableSettings

    with tempfile.TemporaryDirectory(prefix="desk-bench-") as tmp:
        db = Database(sqlite_url(Path(tmp) / "durable.db"))
        db.migrate()
        seed(db, tickets=False)
        customer, numbers = add_orders(db, n + warmup)
        with db.read() as s:
            staff = int(s.scalar(select(Staff.id)) or 0)
        desk = Desk(db, DeskScriptedModel())
        runs = DurableDesk(desk, DurableSettings())  # what `tether serve` runs by default
        profiler = Threads() if mode == "profile" else None
        if profiler is not None:
            profiler.__enter__()
        await runs.start()
        try:
            await _batch(desk, customer, numbers[:warmup], staff)
            if profiler is not None:
                profiler.clear()
            counted = _count(db, runs) if mode == "count" else None
            load = os.getloadavg()[0]
            c0, t0 = time.process_time(), time.perf_counter()
            await _batch(desk, customer, numbers[warmup:], staff)
            cpu, seconds = time.process_time() - c0, time.perf_counter() - t0
            steps = await _steps(runs, numbers[warmup])
        finally:
            await runs.stop()
            if profiler is not None:
                profiler.__exit__()
            db.dispose()
    out: dict[str, Any] = {
        "n": n,
        "seconds": seconds,
        "cpu_ms": cpu / n * 1000,
        "load": load,
        "steps": steps,
    }
    if counted is not None:
        out.update({k: {s: c / n for s, c in v.items()} for k, v in counted.items()})
    if profiler is not None:
        out["shares"] = group(profiler.stats(), _where)
        if os.environ.get("DESK_PROFILE_DUMP"):
            profiler.stats().dump_stats(os.environ["DESK_PROFILE_DUMP"])
    return out


def _count(db: Database, runs: Any) -> dict[str, collections.Counter[str]]:
    """Statements and transactions from now on: on the desk's database (workers and
    console alike) and on the durable log (DBOS in this process and the console's client)."""
    from dbos._dbos import _dbos_global_instance as dbos

    engines = [dbos._sys_db.engine, getattr(runs, "_engine", None)]  # worker's and client's
    log: collections.Counter[str] = collections.Counter()
    for engine in engines:
        if engine is None:
            continue

        @event.listens_for(engine, "before_cursor_execute")
        def _statement(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            log["statements"] += 1

        @event.listens_for(engine, "begin")
        def _begin(conn: Any) -> None:
            log["transactions"] += 1

    return {"desk": count_statements(db), "log": log}


async def _steps(runs: Any, number: str) -> dict[str, int]:
    """The logged operations of one refund ticket's workflows, by name."""
    from tether_desk.durable import workflow_id

    with runs.desk.db.read_connection() as c:
        ticket = c.scalar(select(Ticket.id).join(Order).where(Order.number == number))
    names: collections.Counter[str] = collections.Counter()
    for wid in (workflow_id(int(ticket)), *await _waits(runs, int(ticket))):
        for step in await asyncio.to_thread(runs.client.list_workflow_steps, wid):
            names[str(step["function_name"])] += 1
    return dict(names)


async def _waits(runs: Any, ticket: int) -> list[str]:
    from tether_desk.durable import finish_id, wait_id

    with runs.desk.db.read_connection() as c:
        rows = c.execute(
            select(Approval.run_id, Approval.call_id).where(Approval.ticket_id == ticket)
        ).all()
    return [w for r, c_ in rows for w in (wait_id(r, c_), finish_id(r, c_))]


_IDLE = ("poll' of 'select", "acquire' of '_thread", "wait", "sleep", "get' of '_queue")


def _where(file: str, name: str) -> str | None:
    """The group of a function's own code (``None``: a built-in, charged to its callers)."""
    if file == "~":
        if any(k in name for k in _IDLE):
            return "idle"
        return "SQLite driver" if "sqlite3" in name else None
    for part, key in (
        ("/dbos/", "DBOS"),
        ("/tether_desk/", "desk"),
        ("/tether/", "tether"),
        ("sqlalchemy", "SQLAlchemy"),
        ("pydantic", "pydantic"),
        ("/json/", "json"),
        ("asyncio", "asyncio"),
        ("threading.py", "threads"),
        ("concurrent", "threads"),
    ):
        if part in file:
            return key
    return "other"


async def flow(path: str, n: int, add_orders: Any) -> dict[str, Any]:
    """Open ``n`` refund tickets in the desk at ``path`` (which ``tether serve`` runs),
    then play the console's staff from this process: approve each refund as soon as it
    waits (the decision goes to the run through the durable log), until every ticket has
    its draft. Returns the seconds from the first ticket opened to the last draft."""
    from sqlalchemy import func

    from tether_desk.durable import DurableDesk, DurableSettings

    db = Database(sqlite_url(path))
    customer, numbers = add_orders(db, n)
    with db.read() as s:
        staff = int(s.scalar(select(Staff.id)) or 0)
    desk = Desk(db, DeskScriptedModel())
    runs = DurableDesk(desk, DurableSettings(), process=False)
    await runs.start()
    drafted = select(func.count(Ticket.id)).where(Ticket.status == "draft_ready")
    try:
        with db.read_connection() as c:
            before = int(c.scalar(drafted) or 0)
        t0 = time.perf_counter()
        for number in numbers:
            open_ticket(db, customer, number, "Colis abime", TEXT)
        while True:
            with db.read_connection() as c:
                waiting = c.scalars(_PENDING).all()
                done = int(c.scalar(drafted) or 0) - before
            for approval in waiting:
                await resume(desk, claim_decision(desk, approval, staff, approve=True))
            if done >= n:
                break
            await asyncio.sleep(CONSOLE_EVERY * 2)
        seconds = time.perf_counter() - t0
    finally:
        await runs.stop()
        db.dispose()
    return {"n": n, "seconds": seconds}
