"""Durable runs: step overhead on SQLite, two workers vs one and a killed worker on PostgreSQL.

    uv run python bench/durable.py [--runs 300] [--pg-url URL]

1. Overhead of durable mode per step against the plain loop, on SQLite, in-process: the
   same 3-turn run (3 model requests, 2 tool calls: 5 steps) with an instant scripted
   model, 200 times each way; per-run difference / 5. Target: <= 5 ms p50.
2. Throughput on PostgreSQL: RUNS runs with a scripted model that takes 100 ms a call,
   through one queue (a fixed number of runs at a time per worker), with one worker then two.
   Target: two workers >= 1.8x one.
3. Two workers, one SIGKILLed when half the runs are done; a third worker started with
   ``recover([dead id])`` takes over. Every run must end done, no refund twice.

Without ``--pg-url``, Debian's PostgreSQL (``apt-get install postgresql``) is started on
127.0.0.1 for the benchmark and stopped after it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dbos import DBOS, DBOSClient

from _report import machine, write_section
from tether import Agent, ToolCall, tool
from tether.clients import BaseChatClient, ChatOptions, ChatResponse
from tether.durable import DurableAgent, DurableConfig, launch, shutdown
from tether.messages import Message, StopReason
from tether.tools import ToolSpec

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).with_name("_durable_worker.py")
PG_CTL = ROOT / "tests" / "pg_server" / "pg_ctl"
STEPS_PER_RUN = 5
CONCURRENCY = 5
"""Runs one worker takes from the queue at a time (the queue's ``worker_concurrency``)."""


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


async def overhead(workdir: Path, runs: int = 200) -> tuple[float, float, float, float]:
    """(plain ms/run p50, durable ms/run p50, per-step overhead ms p50, p95)."""
    launch(DurableConfig(f"sqlite:///{workdir / 'overhead.sqlite'}"))
    try:
        for _ in range(20):  # warm up both
            await PLAIN.run("x")
            await DURABLE.run("x")
        plain, durable = [], []
        for _ in range(runs):
            t = time.perf_counter()
            await PLAIN.run("x")
            plain.append(time.perf_counter() - t)
            t = time.perf_counter()
            result = await DURABLE.run("x")
            durable.append(time.perf_counter() - t)
            assert result.output == "done"
    finally:
        shutdown()
    base = statistics.median(plain)
    per_step = sorted((d - base) / STEPS_PER_RUN * 1000 for d in durable)
    return (
        base * 1000,
        statistics.median(durable) * 1000,
        per_step[len(per_step) // 2],
        per_step[int(len(per_step) * 0.95)],
    )


@contextmanager
def postgres(workdir: Path) -> Iterator[str]:
    """Debian's PostgreSQL on 127.0.0.1, on a free port, for the benchmark's length."""
    from port_for import get_port
    from pytest_postgresql.executors.proc import PostgreSQLExecutor

    port = get_port(None)
    assert isinstance(port, int)
    pg = PostgreSQLExecutor(
        executable=str(PG_CTL),
        host="127.0.0.1",
        port=port,
        datadir=str(workdir / "pg" / "data"),
        unixsocketdir=tempfile.gettempdir(),
        logfile=str(workdir / "pg" / "log"),
        startparams="-w",
        dbname="bench",
    )
    pg.start()
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}"
    finally:
        pg.stop()


def create_database(server: str, name: str) -> str:
    import psycopg

    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return f"{server}/{name}"


class Phase:
    """One batch of runs on a fresh database, with its workers."""

    def __init__(self, server: str, name: str, workdir: Path) -> None:
        self.url = create_database(server, name)
        self.dir = workdir / name
        self.dir.mkdir()
        with sqlite3.connect(self.dir / "effects.sqlite") as db:
            db.execute("CREATE TABLE attempts (run_id TEXT)")
            db.execute("CREATE TABLE refunds (key TEXT PRIMARY KEY, amount REAL)")
        DBOS.migrate(self.url)
        self.client = DBOSClient(system_database_url=self.url)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, executor: str, *extra: str) -> None:
        log = open(self.dir / f"{executor}.log", "wb")  # noqa: SIM115
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "BENCH_CONCURRENCY": str(CONCURRENCY)}
        self.workers[executor] = subprocess.Popen(
            [sys.executable, str(WORKER), self.url, executor, str(self.dir), *extra],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        while not (self.dir / f"ready-{executor}").exists():
            if self.workers[executor].poll() is not None:
                raise RuntimeError((self.dir / f"{executor}.log").read_text()[-3000:])
            time.sleep(0.05)

    def enqueue(self, runs: int) -> list[str]:
        ids = [f"run-{i:04d}" for i in range(runs)]
        for wid in ids:
            options = {"queue_name": "bench", "workflow_name": "tether.agent.bench"}
            self.client.enqueue({**options, "workflow_id": wid}, "Refund C-1042.")  # type: ignore[typeddict-item]
        return ids

    def done(self, ids: list[str]) -> int:
        statuses = self.client.list_workflows(
            workflow_ids=ids, status="SUCCESS", load_input=False, load_output=False
        )
        return len(statuses)

    def close(self) -> tuple[int, int, int]:
        """Stop the workers; (runs refunded, refunds done twice, attempts)."""
        (self.dir / "stop").touch()
        for proc in self.workers.values():
            if proc.poll() is None:
                proc.wait(timeout=60)
        self.client.destroy()
        with sqlite3.connect(self.dir / "effects.sqlite") as db:
            refunds = db.execute("SELECT COUNT(*) FROM refunds").fetchone()[0]
            attempts = db.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
            twice = db.execute(
                "SELECT COUNT(*) FROM (SELECT key FROM refunds GROUP BY key HAVING COUNT(*) > 1)"
            ).fetchone()[0]
        return refunds, twice, attempts


def throughput(server: str, workdir: Path, workers: int, runs: int) -> float:
    phase = Phase(server, f"bench_{workers}w", workdir)
    for n in range(workers):
        phase.start(f"w{n}")
    ids = phase.enqueue(runs)
    t = time.perf_counter()
    (phase.dir / "go").touch()
    while phase.done(ids) < runs:
        time.sleep(0.05)
    seconds = time.perf_counter() - t
    refunds, twice, _ = phase.close()
    assert refunds == runs and twice == 0
    return runs / seconds


def killed_midway(server: str, workdir: Path, runs: int) -> dict[str, float]:
    phase = Phase(server, "bench_kill", workdir)
    phase.start("w0")
    phase.start("w1")
    ids = phase.enqueue(runs)
    t = time.perf_counter()
    (phase.dir / "go").touch()
    while phase.done(ids) < runs // 2:
        time.sleep(0.02)
    phase.workers["w1"].send_signal(signal.SIGKILL)
    phase.workers["w1"].wait()
    held = len(phase.client.list_workflows(status="PENDING", executor_id="w1", load_input=False))
    phase.start("w2", "w1")  # the recovery procedure: a live worker takes w1's runs
    while phase.done(ids) < runs:
        time.sleep(0.05)
    seconds = time.perf_counter() - t
    done = phase.done(ids)
    refunds, twice, attempts = phase.close()
    return {
        "done": done,
        "held": held,
        "twice": twice,
        "repeats": attempts - refunds,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--pg-url", help="a PostgreSQL server URL without database name")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        base, durable, p50, p95 = asyncio.run(overhead(workdir))
        print(
            f"overhead: plain {base:.2f} ms/run, durable {durable:.2f} ms/run, "
            f"{p50:.2f} ms/step p50, {p95:.2f} ms/step p95"
        )
        with postgres(workdir) if args.pg_url is None else _given(args.pg_url) as server:
            one = throughput(server, workdir, 1, args.runs)
            print(f"one worker: {one:.1f} runs/s")
            two = throughput(server, workdir, 2, args.runs)
            print(f"two workers: {two:.1f} runs/s ({two / one:.2f}x)")
            kill = killed_midway(server, workdir, args.runs)
            print(f"killed midway: {kill}")
        kill["load"] = os.getloadavg()[0]
    write_section("durable", report(args.runs, base, durable, p50, p95, one, two, kill))


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url.rstrip("/")


def report(
    runs: int,
    base: float,
    durable: float,
    p50: float,
    p95: float,
    one: float,
    two: float,
    kill: dict[str, float],
) -> str:
    ok = "met" if two / one >= 1.8 else "not met"
    killed = (
        f"{int(kill['done'])}/{runs} done, {int(kill['held'])} runs taken over, "
        f"{int(kill['twice'])} refunded twice, {int(kill['repeats'])} refund calls repeated "
        f"(absorbed by the idempotency key), {kill['seconds']:.1f} s"
    )
    ok_step = "met" if p50 <= 5 else "not met"
    return f"""## Durable runs on DBOS (`bench/durable.py`)

Machine: {machine()}, load average {kill["load"]:.1f} at the end (the machine is shared;
PostgreSQL and the workers share its cores). One command: `uv run python
bench/durable.py` (starts Debian's PostgreSQL on 127.0.0.1 for its length).

| measure | result | target |
|---|---|---|
| plain loop, 3-turn run (5 steps), instant model | {base:.2f} ms/run | |
| durable mode, same run, SQLite | {durable:.2f} ms/run | |
| durable overhead per step | {p50:.2f} ms p50, {p95:.2f} ms p95 | <= 5 ms p50: {ok_step} |
| {runs} runs, 100 ms model calls, PostgreSQL, 1 worker | {one:.1f} runs/s | |
| same, 2 workers | {two:.1f} runs/s ({two / one:.2f}x) | >= 1.8x: {ok} |
| 2 workers, one SIGKILLed at half, recovered by a third | {killed} | all done, none twice |

Each worker takes {CONCURRENCY} runs at a time from the queue (`worker_concurrency`); a run
is 3 model calls of 100 ms and 2 tool calls, so one worker's ceiling is about
{CONCURRENCY / 0.3:.0f} runs/s.
"""


if __name__ == "__main__":
    main()
