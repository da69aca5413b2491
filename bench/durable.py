"""Durable runs and the durable desk, in one command:

    uv run python bench/durable.py [--tickets 300] [--concurrency 4] [--rounds 3] [--pg-url URL]
    uv run python bench/durable.py --only desk [--against REV] [--rounds 3] [--timeline]

1. **Overhead per step against the plain loop**, on SQLite, in one process, with an
   instant scripted model: (a) the agent loop, the same 3-turn run (5 steps) 200 times
   as an ``Agent`` and as a ``DurableAgent``; (b) the desk, a refund ticket end to end
   (claim, triage, refund agent, approval, decision, refund, draft), plain pipeline
   against durable workflows, tickets interleaved. Per-run difference / the run's logged
   steps. Target: <= 1 ms p50.
2. **Throughput on PostgreSQL**: TICKETS refund tickets, the desk's scripted model
   answering each call after 100 ms, ``tether worker`` processes taking CONCURRENCY
   tickets at a time each, this process approving every refund as staff would from the
   console: one worker, then two, for each CONCURRENCY given, ROUNDS times (the ratio is
   the median of the rounds, each round's printed beside it). CPU per ticket in the
   workers, in this process (the console's side) and in PostgreSQL (its postmaster and
   backends, from /proc), and a worker's CPU a second once the queue is empty (its
   polling and heartbeat: the part of its CPU per ticket that is paid by the second).
   Workers run with ``tether worker``'s default ``--poll`` (1 s): a run queued by the
   console wakes them by a PostgreSQL notification. Targets: two >= 1.8x one; <= 20 ms of
   worker CPU per ticket. ``bench/durable_worker.py`` runs one round of this part alone,
   faster, with the workers' CPU split (user, system, context switches) and a profiler.
3. **A worker killed midway**: two workers, one SIGKILLed once half the tickets have
   their draft, a third started with ``--recover`` its id: every ticket must end with its
   draft, none refunded twice.

``--only desk`` runs part 1b alone (about 10 s) and writes nothing: in this process, or
with ``--against REV`` in one process per side and round, REV's ``src`` and this tree's
alternating, so the machine's load falls on both alike. ``--timeline`` also prints where one
durable ticket's time goes: milliseconds since it started at each step boundary
(:mod:`tether_desk.durable.boundaries`) and each of this process's moves, median of the
warm tickets.

Without ``--pg-url``, Debian's PostgreSQL (``apt-get install postgresql``) is started on
127.0.0.1 for the benchmark (``tests/postgres_server.py``) and stopped after it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from dbos import DBOS, SetWorkflowID
from sqlalchemy import select

from _durable_workers import POLL, desk_db, killed_midway, throughput
from _report import machine, write_section
from postgres_server import postgres_server
from tether import Agent, ToolCall, tool
from tether.clients import BaseChatClient, ChatOptions, ChatResponse
from tether.durable import DurableAgent, DurableConfig, launch, shutdown
from tether.messages import Message, StopReason
from tether.tools import ToolSpec
from tether_desk.db import Database, sqlite_url
from tether_desk.decisions import claim_decision, decide, resume
from tether_desk.durable import DurableDesk, DurableSettings, workflow_id
from tether_desk.durable.flow import finish_id, ticket_workflow
from tether_desk.models import Approval
from tether_desk.pipeline import Desk, process_ticket
from tether_desk.scripted import DeskScriptedModel

AGENT_STEPS = 5
WARM = 5
"""Tickets of each side left out of the figures of part 1b (warming up)."""
POLL_SECONDS = 0.005
"""The durable desk's polling in part 1b: a waiting approval looks for its decision (SQLite
has no notifications) this often; the wait is part of the measured time."""


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


def approval_of(db: Database, ticket_id: int) -> tuple[int, str, str] | None:
    with db.read_connection() as c:
        row = c.execute(
            select(Approval.id, Approval.run_id, Approval.call_id).where(
                Approval.ticket_id == ticket_id
            )
        ).first()
    return (int(row[0]), str(row[1]), str(row[2])) if row else None


class Timeline:
    """Milliseconds since a ticket started at each named moment (a step boundary of its
    workflows, or a move of this process), per ticket."""

    def __init__(self) -> None:
        self.tickets: list[dict[str, float]] = []
        self._t0 = 0.0

    def start(self) -> None:
        self.tickets.append({})
        self._t0 = time.perf_counter()

    def mark(self, name: str) -> None:
        marks = self.tickets[-1]
        key, n = name, 1
        while key in marks:  # the same boundary again (the agent's turns in each step)
            n += 1
            key = f"{name} #{n}"
        marks[key] = (time.perf_counter() - self._t0) * 1000

    async def boundary(self, name: str, ticket_id: int) -> None:
        self.mark(name)

    def median(self, skip: int) -> list[tuple[str, float]]:
        warm = self.tickets[skip:]
        names = sorted(warm[0], key=lambda k: warm[0][k])
        return [(k, statistics.median(t[k] for t in warm if k in t)) for k in names]


async def desk_overhead(
    workdir: Path, tickets: int = 60, timeline: Timeline | None = None
) -> dict[str, float]:
    """A refund ticket end to end, plain and durable, interleaved; SQLite."""
    plain_db, plain_ids, plain_staff = desk_db(sqlite_url(workdir / "plain.db"), tickets)
    db, ids, staff = desk_db(sqlite_url(workdir / "durable.db"), tickets)
    plain = Desk(plain_db, DeskScriptedModel())
    desk = Desk(db, DeskScriptedModel())
    # the decision's workflow comes through the queue: looked at as often as a wait was
    runs = DurableDesk(
        desk,
        DurableSettings(wait_poll_seconds=POLL_SECONDS, poll_seconds=POLL_SECONDS),
        boundary=timeline.boundary if timeline is not None else None,
    )
    mark = timeline.mark if timeline is not None else (lambda name: None)
    await runs.start()
    plain_times, durable_times, steps = [], [], 0
    plain_cpu: list[float] = []
    durable_cpu: list[float] = []  # the whole process's, all its threads
    try:
        for n, (p, d) in enumerate(zip(plain_ids, ids, strict=True)):
            t, c = time.perf_counter(), time.process_time()
            assert await process_ticket(plain, p) == "awaiting_approval"
            waiting = approval_of(plain_db, p)
            assert waiting is not None
            assert await decide(plain, waiting[0], plain_staff, approve=True) == "draft_ready"
            plain_times.append(time.perf_counter() - t)
            plain_cpu.append(time.process_time() - c)

            if timeline is not None:
                timeline.start()
            t, c = time.perf_counter(), time.process_time()
            with SetWorkflowID(workflow_id(d)):  # started at once: no queue polling here
                handle = await DBOS.start_workflow_async(ticket_workflow, d)
            mark("(bench) ticket workflow started")
            await handle.get_result()
            mark("(bench) ticket workflow result")
            while (stored := approval_of(db, d)) is None:  # noqa: ASYNC110 (another task)
                await asyncio.sleep(0.0005)
            mark("(bench) approval read")
            claimed = claim_decision(desk, stored[0], staff, approve=True)
            mark("(bench) decision claimed")
            await resume(desk, claimed)  # the console's path: the decision's workflow queued
            mark("(bench) resumed: finish queued")
            # started by the decision's delivery: a handle without DBOS's existence check,
            # a read of the log that the console's path does not make
            child = await DBOS.retrieve_workflow_async(
                finish_id(stored[1], stored[2]), existing_workflow=False
            )
            assert await child.get_result(polling_interval_sec=0.0005) == "draft_ready"
            mark("(bench) finish result")
            durable_times.append(time.perf_counter() - t)
            durable_cpu.append(time.process_time() - c)
            if n == 0:
                steps = len(await DBOS.list_workflow_steps_async(workflow_id(d)))
                steps += len(await DBOS.list_workflow_steps_async(finish_id(stored[1], stored[2])))
    finally:
        await runs.stop()
        plain_db.dispose()
        db.dispose()
    warm_plain, warm_durable = plain_times[WARM:], durable_times[WARM:]
    base = statistics.median(warm_plain)
    per_step = [(d - base) / steps * 1000 for d in warm_durable]
    return {
        "plain_ms": base * 1000,
        "durable_ms": statistics.median(warm_durable) * 1000,
        "steps": steps,
        "p50": pct(per_step, 0.5),
        "p95": pct(per_step, 0.95),
        "plain_cpu_ms": statistics.median(plain_cpu[WARM:]) * 1000,
        "durable_cpu_ms": statistics.median(durable_cpu[WARM:]) * 1000,
        "load": os.getloadavg()[0],
    }


def desk_only(args: argparse.Namespace) -> None:
    """Part 1b alone (``--only desk``): in this process, or sides interleaved."""
    if args.against:
        from _report import interleaved

        runs = interleaved(Path(__file__), args.against, args.rounds, "--only", "desk", "--side")
        for label, results in runs.items():
            for r in results:
                print(f"{label}: {json.dumps(r)}")
            med = {k: statistics.median(r[k] for r in results) for k in results[0]}
            print(
                f"{label}, median of {len(results)} rounds: {med['p50']:.2f} ms/step p50; "
                f"plain / durable {med['plain_ms']:.1f} / {med['durable_ms']:.1f} ms, "
                f"CPU {med['plain_cpu_ms']:.1f} / {med['durable_cpu_ms']:.1f} ms per ticket; "
                f"load {med['load']:.1f}"
            )
        return
    timeline = Timeline() if args.timeline else None
    with tempfile.TemporaryDirectory() as tmp:
        desk = asyncio.run(desk_overhead(Path(tmp), timeline=timeline))
    if timeline is not None:
        for name, ms in timeline.median(WARM):
            print(f"{ms:8.2f} ms  {name}")
    print(json.dumps(desk) if args.side else f"desk ticket: {desk}")


Pair = tuple[int, list[dict[str, float]], list[dict[str, float]]]


def postmaster(pg: object) -> int | None:
    """The PID of the PostgreSQL server this benchmark started (``None`` for --pg-url)."""
    root = getattr(pg, "root", None)
    if root is None:
        return None
    return int((Path(root) / "data" / "postmaster.pid").read_text().split()[0])


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
    parser.add_argument(
        "--concurrency", default="4", help="tickets per worker at a time, comma-separated"
    )
    parser.add_argument("--rounds", type=int, default=3, help="one then two workers, N times")
    parser.add_argument("--pg-url", help="a PostgreSQL server URL without database name")
    parser.add_argument("--only", choices=["desk"], help="part 1b alone; writes nothing")
    parser.add_argument("--against", help="with --only desk: a revision to compare with")
    parser.add_argument("--timeline", action="store_true", help="with --only desk")
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only == "desk":
        desk_only(args)
        return
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
        levels = [int(c) for c in args.concurrency.split(",")]
        pairs: list[Pair] = []
        with server(args.pg_url) as pg:
            pid = postmaster(pg)
            for c in levels:
                ones, twos = [], []
                for r in range(args.rounds):
                    for workers, into in ((1, ones), (2, twos)):
                        url = database(pg, f"bench_{workers}w_{c}_{r}")
                        got = asyncio.run(throughput(url, args.tickets, workdir, workers, c, pid))
                        got["load"] = os.getloadavg()[0]
                        into.append(got)
                        print(f"concurrency {c}, round {r + 1}, {workers} worker(s): {got}")
                    load.append(os.getloadavg()[0])
                pairs.append((c, ones, twos))
            kill = asyncio.run(
                killed_midway(database(pg, "bench_kill"), args.tickets, workdir, levels[0])
            )
            print(f"killed midway: {kill}")
    load.append(os.getloadavg()[0])
    write_section("durable", report(args, agent, desk, pairs, kill, load))


def crowded(load: float) -> str:
    """What a load above the machine's cores does to the two-worker ratio."""
    if load <= (os.cpu_count() or 1):
        return ""
    return (
        f" With a load average up to {load:.0f} on {os.cpu_count()} cores, the kernel"
        " shares the CPU by runnable process: two worker processes get about twice the"
        " share of one, so the ratio says as much about the neighbours as about the"
        " workers (a lone worker then used well under a core); the CPU per ticket is"
        " the steadier figure."
    )


def report(
    args: argparse.Namespace,
    agent: dict[str, float],
    desk: dict[str, float],
    pairs: list[Pair],
    kill: dict[str, float],
    load: list[float],
) -> str:

    def met(ok: bool) -> str:
        return "met" if ok else "**not met**"

    n = args.tickets
    killed = (
        f"{int(kill['done'])}/{n} with their draft, {int(kill['refunded'])} refunded, "
        f"{int(kill['twice'])} refunded twice, runs taken over: {int(kill['held'])}, "
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
            f"<= 1 ms p50: {met(agent['p50'] <= 1)}",
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
            f"<= 1 ms p50: {met(desk['p50'] <= 1)}",
        ),
    ]
    for c, ones, twos in pairs:
        ratios = [t["per_s"] / o["per_s"] for o, t in zip(ones, twos, strict=True)]
        ratio = statistics.median(ratios)
        spread = ", ".join(f"{x:.2f}" for x in ratios)
        med = {k: statistics.median(o[k] for o in ones) for k in ones[0]}
        med2 = {k: statistics.median(t[k] for t in twos) for k in twos[0]}
        rows.append(
            (
                f"{n} refund tickets, 100 ms model calls, PostgreSQL, 1 `tether worker` "
                f"taking {c} at a time (median of {len(ones)} rounds)",
                f"{med['per_s']:.1f} tickets/s",
                "",
            )
        )
        rows.append(
            (
                f"same, 2 workers taking {c} at a time each",
                f"{med2['per_s']:.1f} tickets/s: **{ratio:.2f}x** (median; rounds: {spread})",
                f">= 1.8x: {met(ratio >= 1.8)}",
            )
        )
        for label, m, k in (("1 worker", med, 1), ("2 workers", med2, 2)):
            total = m["worker_cpu_ms"] + m["console_cpu_ms"] + m["postgres_cpu_ms"]
            cores = total / 1000 * m["per_s"]
            idle = m["idle_ms_per_s"] * k / m["per_s"]  # the by-the-second part, per ticket
            rows.append(
                (
                    f"CPU per ticket, {label} taking {c} at a time: workers / console / PostgreSQL",
                    f"{m['worker_cpu_ms']:.1f} / {m['console_cpu_ms']:.1f} / "
                    f"{m['postgres_cpu_ms']:.1f} ms ({total:.1f} ms in all: {cores:.2f} of "
                    f"the 2 cores busy with it); a worker idle: {m['idle_ms_per_s']:.0f} ms "
                    f"a second, {idle:.1f} ms of each ticket at this rate",
                    f"worker <= 20 ms: {met(m['worker_cpu_ms'] <= 20)}",
                )
            )
    rows += [
        (
            f"2 workers taking {pairs[0][0]} at a time, one SIGKILLed at half, a third "
            "started with `--recover`",
            killed,
            f"all done, none twice: {met(all_done)}",
        ),
    ]
    table = "\n".join(f"| {a} | {b} | {c} |" for a, b, c in rows)
    return f"""## Durable runs and the durable desk (`bench/durable.py`)

{machine()}; load average {load[0]:.1f} at the start, {load[-1]:.1f} at the end, up to
{max(load):.1f} between phases (the machine is shared: other work ran on its two cores,
PostgreSQL and the workers share them). One command: `uv run python bench/durable.py`
(starts Debian's PostgreSQL on 127.0.0.1 for its length).

{table}

A desk ticket here makes four model calls (triage, two agent turns before the approval,
one after) and waits for its approval, which this process gives as staff would from the
console, as soon as it is stored. Workers run with `--poll {POLL:g}` (the default: a run
queued by the console wakes them by a PostgreSQL notification, the poll is a fallback).
A worker taking C tickets at a time from the queue tops out near C / 0.3 s (the three
model calls before the approval; a ticket waiting for its approval holds no place and
no workflow: its decision queues the run's finish). The CPU columns say when the machine,
not the model, sets the pace: two cores shared by both
workers, PostgreSQL, this process and the load named above.{crowded(max(load))} The desk's
per-step figure is the ticket's whole overhead over its logged steps (fewer steps make
each look dearer), and includes the pickup of the decision's workflow from the queue,
looked at every {POLL_SECONDS * 1000:.0f} ms here (0.1 s in `tether serve`).
"""


if __name__ == "__main__":
    main()
