"""The console's side of a durable refund ticket, in one command (about a minute a round):

    uv run python bench/desk_console.py [--tickets 150] [--rounds 3] [--against REV]

The durable run of ``bench/desk.py`` (``_desk_durable.py``: ``tether serve``'s default, a
batch of refund tickets, this process playing the console) with the console's work timed
apart: handing the tickets to the queue, claiming each decision, delivering it, sending
each draft, on the loop's thread and in the threads they use (each call's CPU counted
once); and its calls on the durable log per ticket (``list_workflows``, the status reads
of :mod:`tether.durable.status`, enqueues, messages sent). ``--against REV`` runs the same
on another revision's ``src`` (exported with git archive), round by round with this
tree's; the table gives the median of the rounds and the load average. CPU figures are
thread CPU time: less sensitive to a loaded machine than wall time, not immune to it.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

from _report import interleaved

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
LOG_CALLS = ("list_workflows", "_enqueue", "send")


class Probe:
    """Thread CPU and calls per key; a call inside another probed call on the same thread
    is counted, its CPU only in the outer one."""

    def __init__(self) -> None:
        self.cpu: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self._depth = threading.local()

    def clear(self) -> None:
        self.cpu.clear()
        self.calls.clear()

    def _enter(self) -> int:
        depth: int = getattr(self._depth, "n", 0)
        self._depth.n = depth + 1
        return depth

    def _leave(self, depth: int, key: str, t0: float) -> None:
        self._depth.n = depth
        if depth == 0:
            self.cpu[key] += time.thread_time() - t0

    def call(self, fn: Callable[..., Any], key: str) -> Callable[..., Any]:
        def probed(*args: Any, **kwargs: Any) -> Any:
            self.calls[key] += 1
            depth, t0 = self._enter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self._leave(depth, key, t0)

        return probed

    def coroutine(self, fn: Callable[..., Any], key: str) -> Callable[..., Any]:
        """``fn`` async: each of its slices on the loop's thread is timed."""
        probe = self

        class Timed:
            def __init__(self, coro: Any) -> None:
                self.coro = coro

            def __await__(self) -> Generator[Any, Any, Any]:
                it = self.coro.__await__()
                value: Any = None
                exc: BaseException | None = None
                while True:
                    depth, t0 = probe._enter(), time.thread_time()
                    try:
                        step = it.send(value) if exc is None else it.throw(exc)
                    except StopIteration as done:
                        return done.value
                    finally:
                        probe._leave(depth, key, t0)
                    try:
                        value, exc = (yield step), None
                    except BaseException as e:  # handed to the coroutine
                        value, exc = None, e

        def probed(*args: Any, **kwargs: Any) -> Any:
            self.calls[key] += 1
            return Timed(fn(*args, **kwargs))

        return probed


def side(tickets: int) -> dict[str, Any]:
    """One measure in this process, on whichever desk the import path gives."""
    sys.path.insert(0, str(BENCH))
    from dbos import DBOSClient

    import _desk_durable as bench
    from _desk_driver import WARMUP, add_orders
    from tether_desk.durable import runner

    probe = Probe()
    for name in LOG_CALLS:
        setattr(DBOSClient, name, probe.call(getattr(DBOSClient, name), f"log: {name}"))
    try:
        from tether.durable.status import WorkflowLog

        for name in ("get", "existing"):
            setattr(WorkflowLog, name, probe.call(getattr(WorkflowLog, name), f"log: {name}"))
    except ImportError:  # a revision before it
        pass
    for name in ("_decided_ticket", "_new_after"):
        method = getattr(runner.DurableDesk, name)
        setattr(runner.DurableDesk, name, probe.call(method, f"desk: {name}"))
    runner.DurableDesk.submit_new = probe.coroutine(  # type: ignore[method-assign]
        runner.DurableDesk.submit_new, "submit_new"
    )
    bench.claim_decision = probe.call(bench.claim_decision, "claim_decision")
    bench.resume = probe.coroutine(bench.resume, "resume")
    bench.send_reply = probe.call(bench.send_reply, "send_reply")
    batch, batches = bench._batch, []

    async def measured(*args: Any) -> set[int]:
        batches.append(1)
        if len(batches) == 2:  # the warm-up is over
            probe.clear()
        return await batch(*args)

    bench._batch = measured
    out = asyncio.run(bench.durable(tickets, "time", WARMUP, add_orders))
    console = sum(probe.cpu.values()) / tickets * 1000
    return {
        "cpu_ms": out["cpu_ms"],
        "console_ms": console,
        "load": out["load"],
        "calls": {k: v / tickets for k, v in probe.calls.items()},
        "parts_ms": {k: v / tickets * 1000 for k, v in probe.cpu.items()},
    }


def report(runs: dict[str, list[dict[str, Any]]], tickets: int) -> None:
    def median(label: str, get: Callable[[dict[str, Any]], float]) -> str:
        return f"{statistics.median(get(r) for r in runs[label]):.2f}"

    keys = sorted({k for rs in runs.values() for r in rs for k in r["calls"]})
    parts = sorted({k for rs in runs.values() for r in rs for k in r["parts_ms"]})
    heads = list(runs)
    print(
        f"| {tickets} durable refund tickets, median of {len(runs[heads[0]])} rounds | "
        + " | ".join(heads)
        + " |"
    )
    print("|---" * (len(heads) + 1) + "|")
    rows: list[tuple[str, Callable[[dict[str, Any]], float]]] = [
        ("CPU per ticket, whole process (ms)", lambda r: r["cpu_ms"]),
        ("console's CPU per ticket (ms)", lambda r: r["console_ms"]),
        ("console's share of the CPU", lambda r: r["console_ms"] / r["cpu_ms"]),
    ]
    rows += [(f"  {p} (ms)", lambda r, p=p: r["parts_ms"].get(p, 0.0)) for p in parts]
    rows += [(f"calls per ticket, {k}", lambda r, k=k: r["calls"].get(k, 0.0)) for k in keys]
    rows += [("load average (1 min) at the start", lambda r: r["load"])]
    for label, get in rows:
        print(f"| {label} | " + " | ".join(median(h, get) for h in heads) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tickets", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", metavar="REV", help="compare with this revision's desk")
    parser.add_argument("--side", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(side(args.side)))
        return
    runs = interleaved(Path(__file__), args.against, args.rounds, "--side", args.tickets)
    report(runs, args.tickets)


if __name__ == "__main__":
    main()
