"""A ``tether worker``'s CPU per ticket on PostgreSQL, quickly (part 2 of
``bench/durable.py`` in one round, about 30 s with the defaults):

    uv run python bench/durable_worker.py [--tickets 150] [--workers 1] [--concurrency 4]
        [--pg-url URL] [--profile DIR]

The same phase as ``bench/durable.py``'s throughput (refund tickets, the desk's scripted
model answering after 100 ms, ``tether worker`` processes, this process approving each
refund as staff would), split finer: the workers' user and system CPU per ticket and
their context switches per ticket (from /proc), PostgreSQL's CPU per ticket, then a
worker's CPU a second with the queue empty. ``--profile DIR`` records each worker with
py-spy (``py-spy`` on PATH, or ``PY_SPY``) into ``DIR/wN.txt`` (collapsed stacks, idle
threads left out). Prints JSON and the load average. Run it from another tree's ``src``
(``PYTHONPATH=OTHER/src``) to compare revisions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _durable_workers import IDLE_SECONDS, Phase, tree_cpu_seconds


def proc_counts(pid: int) -> tuple[float, float, int]:
    """(user s, system s, context switches) of a live process, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():  # threads still alive
        try:
            for line in (task / "status").read_text().splitlines():
                if "ctxt_switches" in line:
                    switches += int(line.split()[1])
        except OSError:
            continue
    return int(fields[11]) / tick, int(fields[12]) / tick, switches


def totals(phase: Phase) -> tuple[float, float, int]:
    user = system = 0.0
    switches = 0
    for proc in phase.workers.values():
        u, s, c = proc_counts(proc.pid)
        user, system, switches = user + u, system + s, switches + c
    return user, system, switches


def profilers(phase: Phase, out: Path) -> list[subprocess.Popen[bytes]]:
    spy = os.environ.get("PY_SPY") or shutil.which("py-spy") or "py-spy"
    out.mkdir(parents=True, exist_ok=True)
    options = ["--format", "raw", "--threads", "--gil", "--rate", "200", "--nonblocking"]
    return [
        subprocess.Popen(
            [spy, "record", "--pid", str(p.pid), *options, "--output", str(out / f"{name}.txt")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for name, p in phase.workers.items()
    ]


async def run(
    url: str, tickets: int, workers: int, c: int, pg_pid: int | None, profile: Path | None
) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        phase = Phase(url, tickets, Path(tmp), c)
        await phase.runs.start()
        pg = (lambda: tree_cpu_seconds(pg_pid)) if pg_pid else (lambda: 0.0)
        spies: list[subprocess.Popen[bytes]] = []
        try:
            for n in range(workers):
                phase.start(f"w{n}")
            await asyncio.sleep(1.0)  # settle: recovery, first looks
            if profile is not None:
                spies = profilers(phase, profile)
                await asyncio.sleep(0.5)
            u0, s0, c0 = totals(phase)
            t, pg0, console = time.perf_counter(), pg(), time.process_time()
            await phase.runs.submit_new()
            await phase.until(tickets)
            seconds = time.perf_counter() - t
            u1, s1, c1 = totals(phase)
            pg_cpu, console = pg() - pg0, time.process_time() - console
            await asyncio.sleep(0.5)
            iu, is_, ic = totals(phase)
            await asyncio.sleep(IDLE_SECONDS)
            ju, js, jc = totals(phase)
        finally:
            for spy in spies:
                spy.send_signal(2)
                spy.wait(timeout=30)
            await phase.runs.stop()
            refunded, twice = phase.close()
    assert refunded == tickets and twice == 0, (refunded, twice)
    per = 1000 / tickets
    return {
        "per_s": round(tickets / seconds, 2),
        "worker_cpu_ms": round((u1 - u0 + s1 - s0) * per, 2),
        "worker_user_ms": round((u1 - u0) * per, 2),
        "worker_sys_ms": round((s1 - s0) * per, 2),
        "worker_ctxsw": round((c1 - c0) / tickets, 1),
        "postgres_cpu_ms": round(pg_cpu * per, 2) if pg_pid else float("nan"),
        "console_cpu_ms": round(console * per, 2),
        "idle_ms_per_s": round((ju - iu + js - is_) / IDLE_SECONDS / workers * 1000, 1),
        "idle_ctxsw_per_s": round((jc - ic) / IDLE_SECONDS / workers, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tickets", type=int, default=150)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--pg-url", help="a PostgreSQL server URL without database name")
    parser.add_argument("--profile", type=Path, help="py-spy each worker into this folder")
    args = parser.parse_args()
    from durable import database, postmaster, server

    with server(args.pg_url) as pg:
        for r in range(args.rounds):
            load = os.getloadavg()[0]
            url = database(pg, f"bench_worker_{r}")
            got = asyncio.run(
                run(url, args.tickets, args.workers, args.concurrency, postmaster(pg), args.profile)
            )
            print(
                json.dumps(
                    {**got, "load": round(load, 2), "load_end": round(os.getloadavg()[0], 2)}
                )
            )


if __name__ == "__main__":
    main()
