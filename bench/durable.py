"""Durable runs and the durable desk, in one command:

    uv run python bench/durable.py [--tickets 300] [--concurrency 4] [--pg-url URL]

1. **Overhead per step against the plain loop**, on SQLite, in one process, with an
   instant scripted model: (a) the agent loop, the same 3-turn run (5 steps) 200 times
   as an ``Agent`` and as a ``DurableAgent``; (b) the desk, a refund ticket end to end
   (claim, triage, refund agent, approval, decision, refund, draft), plain pipeline
   against durable workflows, tickets interleaved. Per-run difference / the run's logged
   steps. Target: <= 5 ms p50.
2. **Throughput on PostgreSQL**: TICKETS refund tickets, the desk's scripted model
   answering each call after 100 ms, ``tether worker`` processes taking CONCURRENCY
   tickets at a time each, this process approving every refund as staff would from the
   console: one worker, then two. Target: two >= 1.8x one.
3. **A worker killed midway**: two workers, one SIGKILLed once half the tickets have
   their draft, a third started with ``--recover`` its id: every ticket must end with its
   draft, none refunded twice.

Without ``--pg-url``, Debian's PostgreSQL (``apt-get install postgresql``) is started on
127.0.0.1 for the benchmark (``tests/postgres_server.py``) and stopped after it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from dbos import DBOS, DBOSClient, SetWorkflowID
from sqlalchemy import func, insert, select

from _report import machine, write_section
from postgres_server import postgres_server
from tether import Agent, ToolCall, tool
from tether.clients import BaseChatClient, ChatOptions, ChatResponse
from tether.durable import DurableAgent, DurableConfig, launch, shutdown
from tether.messages import Message, StopReason
from tether.tools import ToolSpec
from tether_desk.db import Database, sqlite_url
from tether_desk.decisions import claim_decision, decide, resume
from tether_desk.durable import DurableDesk, DurableSettings, system_database_url, workflow_id
from tether_desk.durable.flow import ticket_workflow, wait_id
from tether_desk.models import Approval, Customer, Order, Refund, Staff, Ticket
from tether_desk.pipeline import Desk, process_ticket
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed

AGENT_STEPS = 5
POLL_SECONDS = 0.005
"""The durable desk's polling in part 1b: a waiting approval looks for its decision (SQLite
has no notifications) this often; the wait is part of the measured time."""
TEXT = "Mon colis est arrive abime, je demande 20 EUR."


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- 1a. the agent loop ------------------------------------------------------------------


class Instant(BaseChatClient):
    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        turn = 1 + sum(1 for m in messages if m.role == "assistant")
        if turn == 3:
            return ChatResponse((Message.assistant("done"),), StopReason.parse("end_turn"))
        call = ToolCall(f"c{turn}", "lookup", {"order": "C-1042"})
        return ChatResponse((Message("assistant", (call,)),), StopReason.parse("tool_use"))


@tool(thread=False)
def lookup(order: str) -> str:
    """Read an order. Use it first. It changes nothing."""
    return f"{order}: shipped"


PLAIN = Agent(Instant(), [lookup])
DURABLE = DurableAgent(Agent(Instant(), [lookup]), "bench.overhead")


async def agent_overhead(runs: int = 200) -> dict[str, float]:
    """The agent loop as it is and as a durable run (DBOS launched in this process)."""
    for _ in range(20):  # warm up both
        await PLAIN.run("x")
        await DURABLE.run("x")
    plain, durable = [], []
    for _ in range(runs):
        t = time.perf_counter()
        await PLAIN.run("x")
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        assert (await DURABLE.run("x")).output == "done"
        durable.append(time.perf_counter() - t)
    base = statistics.median(plain)
    per_step = [(d - base) / AGENT_STEPS * 1000 for d in durable]
    return {
        "plain_ms": base * 1000,
        "durable_ms": statistics.median(durable) * 1000,
        "p50": pct(per_step, 0.5),
        "p95": pct(per_step, 0.95),
    }


# --- 1b. the desk, in one process ----------------------------------------------------------


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


def approval_of(db: Database, ticket_id: int) -> tuple[int, str, str] | None:
    with db.read_connection() as c:
        row = c.execute(
            select(Approval.id, Approval.run_id, Approval.call_id).where(
                Approval.ticket_id == ticket_id
            )
        ).first()
    return (int(row[0]), str(row[1]), str(row[2])) if row else None


async def desk_overhead(workdir: Path, tickets: int = 60) -> dict[str, float]:
    """A refund ticket end to end, plain and durable, interleaved; SQLite."""
    plain_db, plain_ids, plain_staff = desk_db(sqlite_url(workdir / "plain.db"), tickets)
    db, ids, staff = desk_db(sqlite_url(workdir / "durable.db"), tickets)
    plain = Desk(plain_db, DeskScriptedModel())
    desk = Desk(db, DeskScriptedModel())
    runs = DurableDesk(desk, DurableSettings(poll_seconds=POLL_SECONDS))
    await runs.start()
    plain_times, durable_times, steps = [], [], 0
    try:
        for n, (p, d) in enumerate(zip(plain_ids, ids, strict=True)):
            t = time.perf_counter()
            assert await process_ticket(plain, p) == "awaiting_approval"
            waiting = approval_of(plain_db, p)
            assert waiting is not None
            assert await decide(plain, waiting[0], plain_staff, approve=True) == "draft_ready"
            plain_times.append(time.perf_counter() - t)

            t = time.perf_counter()
            with SetWorkflowID(workflow_id(d)):  # started at once: no queue polling here
                handle = await DBOS.start_workflow_async(ticket_workflow, d)
            await handle.get_result()
            while (stored := approval_of(db, d)) is None:  # noqa: ASYNC110 (another task)
                await asyncio.sleep(0.0005)
            claimed = claim_decision(desk, stored[0], staff, approve=True)
            await resume(desk, claimed)  # the console's path: the decision is sent
            child = await DBOS.retrieve_workflow_async(wait_id(stored[1], stored[2]))
            assert await child.get_result() == "draft_ready"
            durable_times.append(time.perf_counter() - t)
            if n == 0:
                steps = len(await DBOS.list_workflow_steps_async(workflow_id(d)))
                steps += len(await DBOS.list_workflow_steps_async(wait_id(stored[1], stored[2])))
    finally:
        await runs.stop()
        plain_db.dispose()
        db.dispose()
    warm_plain, warm_durable = plain_times[5:], durable_times[5:]
    base = statistics.median(warm_plain)
    per_step = [(d - base) / steps * 1000 for d in warm_durable]
    return {
        "plain_ms": base * 1000,
        "durable_ms": statistics.median(warm_durable) * 1000,
        "steps": steps,
        "p50": pct(per_step, 0.5),
        "p95": pct(per_step, 0.95),
    }


# --- 2 and 3. workers on PostgreSQL ----------------------------------------------------------


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
        argv += ["--concurrency", str(self.concurrency), "--poll", "0.05", *extra]
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


async def throughput(url: str, tickets: int, workdir: Path, workers: int, c: int) -> float:
    phase = Phase(url, tickets, workdir, c)
    await phase.runs.start()
    try:
        for n in range(workers):
            phase.start(f"w{n}")
        t = time.perf_counter()
        await phase.runs.submit_new()
        await phase.until(tickets)
        seconds = time.perf_counter() - t
    finally:
        await phase.runs.stop()
        refunded, twice = phase.close()
    assert refunded == tickets and twice == 0, (refunded, twice)
    return tickets / seconds


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


@contextmanager
def server(url: str | None) -> Iterator[object]:
    if url is not None:
        yield url.rstrip("/")
        return
    with postgres_server() as pg:
        yield pg


def database(pg: object, name: str) -> str:
    if isinstance(pg, str):
        import psycopg

        with psycopg.connect(f"{pg}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        return f"{pg}/{name}"
    return str(pg.create_database(name))  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tickets", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--pg-url", help="a PostgreSQL server URL without database name")
    args = parser.parse_args()
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        launch(DurableConfig(f"sqlite:///{workdir / 'agent.sqlite'}"))
        try:
            agent = asyncio.run(agent_overhead())
        finally:
            shutdown()
        print(f"agent loop: {agent}")
        desk = asyncio.run(desk_overhead(workdir))
        print(f"desk ticket: {desk}")
        with server(args.pg_url) as pg:
            one = asyncio.run(
                throughput(database(pg, "bench_1w"), args.tickets, workdir, 1, args.concurrency)
            )
            print(f"one worker: {one:.1f} tickets/s")
            two = asyncio.run(
                throughput(database(pg, "bench_2w"), args.tickets, workdir, 2, args.concurrency)
            )
            print(f"two workers: {two:.1f} tickets/s ({two / one:.2f}x)")
            kill = asyncio.run(
                killed_midway(database(pg, "bench_kill"), args.tickets, workdir, args.concurrency)
            )
            print(f"killed midway: {kill}")
    load.append(os.getloadavg()[0])
    write_section("durable", report(args, agent, desk, one, two, kill, load))


def report(
    args: argparse.Namespace,
    agent: dict[str, float],
    desk: dict[str, float],
    one: float,
    two: float,
    kill: dict[str, float],
    load: list[float],
) -> str:
    def met(ok: bool) -> str:
        return "met" if ok else "**not met**"

    n = args.tickets
    killed = (
        f"{int(kill['done'])}/{n} with their draft, {int(kill['refunded'])} refunded, "
        f"{int(kill['twice'])} refunded twice, {int(kill['held'])} runs taken over, "
        f"{kill['seconds']:.1f} s"
    )
    all_done = kill["done"] == n and kill["twice"] == 0 and kill["refunded"] == n
    rows = [
        ("measure", "result", "target"),
        ("---", "---", "---"),
        (
            "agent loop, 3-turn run (5 steps), instant model: plain / durable, SQLite",
            f"{agent['plain_ms']:.2f} / {agent['durable_ms']:.2f} ms per run",
            "",
        ),
        (
            "durable overhead per step, agent loop",
            f"{agent['p50']:.2f} ms p50, {agent['p95']:.2f} ms p95",
            f"<= 5 ms p50: {met(agent['p50'] <= 5)}",
        ),
        (
            "desk refund ticket end to end, instant model: plain / durable, SQLite",
            f"{desk['plain_ms']:.1f} / {desk['durable_ms']:.1f} ms per ticket "
            f"({desk['steps']:.0f} logged steps)",
            "",
        ),
        (
            "durable overhead per step, desk ticket",
            f"{desk['p50']:.2f} ms p50, {desk['p95']:.2f} ms p95",
            f"<= 5 ms p50: {met(desk['p50'] <= 5)}",
        ),
        (
            f"{n} refund tickets, 100 ms model calls, PostgreSQL, 1 `tether worker`",
            f"{one:.1f} tickets/s",
            "",
        ),
        (
            "same, 2 workers",
            f"{two:.1f} tickets/s ({two / one:.2f}x)",
            f">= 1.8x: {met(two / one >= 1.8)}",
        ),
        (
            "2 workers, one SIGKILLed at half, a third started with `--recover`",
            killed,
            f"all done, none twice: {met(all_done)}",
        ),
    ]
    table = "\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows)
    return f"""## Durable runs and the durable desk (`bench/durable.py`)

{machine()}; load average {load[0]:.1f} at the start, {load[-1]:.1f} at the end (the
machine is shared: other work ran on its two cores, PostgreSQL and the workers share
them). One command: `uv run python bench/durable.py` (starts Debian's PostgreSQL on
127.0.0.1 for its length).

{table}

A desk ticket here makes four model calls (triage, two agent turns before the approval,
one after) and waits for its approval, which this process gives as staff would from the
console, as soon as it is stored. Each worker takes {args.concurrency} tickets at a time
from the queue; a ticket waiting for its approval does not hold one of those places (it
waits in a workflow of its own), so a worker's ceiling is about
{args.concurrency} / 0.3 s = {args.concurrency / 0.3:.0f} tickets/s. The desk's
per-step figure includes the wake-up of the approval's wait on SQLite, which polls every
{POLL_SECONDS * 1000:.0f} ms here (1 s by default; PostgreSQL notifies at once).
"""


if __name__ == "__main__":
    main()
