"""Workers on PostgreSQL for bench/durable.py: throughput and a worker killed midway.

Each phase gets a fresh database with its tickets, ``tether worker`` processes (the real
command, the desk's scripted model answering after 100 ms) and the console's side in this
process, which approves every refund as soon as it waits, as staff would.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from dbos import DBOSClient
from sqlalchemy import func, insert, select

from tether_desk.db import Database
from tether_desk.decisions import claim_decision, resume
from tether_desk.durable import DurableDesk, DurableSettings, system_database_url
from tether_desk.models import Approval, Customer, Order, Refund, Staff, Ticket
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed

TEXT = "Mon colis est arrive abime, je demande 20 EUR."
POLL = 1.0
"""Seconds between a worker's looks at the queue (``tether worker --poll``): its default.
On PostgreSQL a queued run wakes the workers at once (a notification from the database,
``tether.durable.wakeup``) and a freed place wakes its own worker, so the poll is only a
fallback; the benchmark used 0.1 s while a decision queued from the console waited for
the next look."""


IDLE_SECONDS = 3.0
"""How long the workers are watched with an empty queue after a batch."""


def desk_db(url: str, tickets: int) -> tuple[Database, list[int], int]:
    """A migrated, seeded desk with ``tickets`` refund tickets, each on its own order."""
    db = Database(url)
    db.migrate()
    seed(db, tickets=False)
    with db.write() as s:
        customer = s.scalar(select(Customer.id).where(Customer.email.like("marie%")))
        staff = int(s.scalar(select(Staff.id)) or 0)
        orders = s.execute(
            insert(Order).returning(Order.id),
            [
                {
                    "number": f"C-{5000 + i:04d}",
                    "customer_id": customer,
                    "status": "shipped",
                    "amount_paid_cents": 4200,
                    "shipping_address": "x",
                    "payment_method": "x",
                }
                for i in range(tickets)
            ],
        ).scalars()
        rows = [
            {"customer_id": customer, "order_id": o, "subject": "Abime", "body": TEXT}
            for o in orders
        ]
        ids = list(s.execute(insert(Ticket).returning(Ticket.id), rows).scalars())
    return db, ids, staff


class Phase:
    """One batch of tickets on a fresh database, its workers, and the console's side."""

    def __init__(self, url: str, tickets: int, workdir: Path, concurrency: int) -> None:
        self.db, self.ids, self.staff = desk_db(url, tickets)
        self.url, self.workdir, self.concurrency = url, workdir, concurrency
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.desk = Desk(self.db, DeskScriptedModel())
        self.runs = DurableDesk(self.desk, DurableSettings(), process=False)

    def start(self, worker_id: str, *extra: str) -> None:
        log = self.workdir / f"{worker_id}.log"
        argv = [sys.executable, "-c", "from tether.cli import main; main()", "worker"]
        argv += ["--db", self.url, "--id", worker_id, "--model", "scripted:0.1"]
        argv += ["--concurrency", str(self.concurrency), "--poll", str(POLL), *extra]
        with open(log, "wb") as out:
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            self.workers[worker_id] = subprocess.Popen(argv, stdout=out, stderr=out, env=env)
        while b"taking tickets" not in log.read_bytes():
            if self.workers[worker_id].poll() is not None:
                raise RuntimeError(log.read_text()[-3000:])
            time.sleep(0.05)

    async def approve(self) -> None:
        with self.db.read_connection() as c:
            waiting = c.scalars(select(Approval.id).where(Approval.status == "pending")).all()
        for aid in waiting:
            await resume(self.desk, claim_decision(self.desk, aid, self.staff, approve=True))

    def done(self) -> int:
        with self.db.read_connection() as c:
            return int(
                c.scalar(select(func.count(Ticket.id)).where(Ticket.status == "draft_ready")) or 0
            )

    async def until(self, count: int) -> None:
        while self.done() < count:
            await self.approve()
            await asyncio.sleep(0.02)

    def cpu_seconds(self) -> float:
        """CPU time the live workers have used so far (from /proc)."""
        total = 0
        for proc in self.workers.values():
            if proc.poll() is None:
                fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / os.sysconf("SC_CLK_TCK")

    def close(self) -> tuple[int, int]:
        """Stop the workers; (tickets refunded, tickets refunded twice)."""
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=60)
        with self.db.read_connection() as c:
            per_ticket = c.execute(
                select(Refund.ticket_id, func.count(Refund.id)).group_by(Refund.ticket_id)
            ).all()
        self.db.dispose()
        return len(per_ticket), sum(1 for _, n in per_ticket if n > 1)


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process, of its children still running, and of the children it has
    reaped (PostgreSQL's postmaster and its backends)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == pid:
            total += sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
        elif int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


async def throughput(
    url: str, tickets: int, workdir: Path, workers: int, c: int, server_pid: int | None = None
) -> dict[str, float]:
    """Tickets per second, and CPU milliseconds per ticket in the workers, in this process
    (the console's side) and in PostgreSQL (``server_pid``: its postmaster, if known);
    then a worker's CPU milliseconds per second with the queue empty (its polling, its
    heartbeat and background loop: a cost by the second, not by the ticket)."""
    phase = Phase(url, tickets, workdir, c)
    await phase.runs.start()
    pg = (lambda: tree_cpu_seconds(server_pid)) if server_pid else (lambda: 0.0)
    try:
        for n in range(workers):
            phase.start(f"w{n}")
        t, cpu, console = time.perf_counter(), phase.cpu_seconds(), time.process_time()
        pg0 = pg()
        await phase.runs.submit_new()
        await phase.until(tickets)
        seconds = time.perf_counter() - t
        cpu = phase.cpu_seconds() - cpu
        console = time.process_time() - console
        pg_cpu = pg() - pg0
        idle = phase.cpu_seconds()  # the queue empty: what polling and heartbeats cost
        await asyncio.sleep(IDLE_SECONDS)
        idle = (phase.cpu_seconds() - idle) / IDLE_SECONDS / workers
    finally:
        await phase.runs.stop()
        refunded, twice = phase.close()
    assert refunded == tickets and twice == 0, (refunded, twice)
    return {
        "per_s": tickets / seconds,
        "worker_cpu_ms": cpu / tickets * 1000,
        "console_cpu_ms": console / tickets * 1000,
        "postgres_cpu_ms": pg_cpu / tickets * 1000 if server_pid else float("nan"),
        "seconds": seconds,
        "idle_ms_per_s": idle * 1000,
    }


async def killed_midway(url: str, tickets: int, workdir: Path, c: int) -> dict[str, float]:
    phase = Phase(url, tickets, workdir, c)
    await phase.runs.start()
    try:
        phase.start("w0")
        phase.start("w1")
        t = time.perf_counter()
        await phase.runs.submit_new()
        await phase.until(tickets // 2)
        phase.workers["w1"].send_signal(signal.SIGKILL)
        phase.workers["w1"].wait()
        client = DBOSClient(system_database_url=system_database_url(url))
        held = len(client.list_workflows(status="PENDING", executor_id="w1", load_input=False))
        client.destroy()
        phase.start("w2", "--recover", "w1")  # the procedure for a worker gone for good
        await phase.until(tickets)
        seconds = time.perf_counter() - t
        done = phase.done()
    finally:
        await phase.runs.stop()
        refunded, twice = phase.close()
    return {"done": done, "held": held, "refunded": refunded, "twice": twice, "seconds": seconds}
