"""Latency of a sandboxed `true`: bare bubblewrap, the sandbox, and the shell tool, side by side.

Run: ``uv run python bench/sandbox_latency.py [--runs N] [--gap-ms G]``. Every variant runs
in the same process, interleaved round by round, so the ratios to bare bwrap hold on a
loaded machine. Before each timed call the loop idles ``--gap-ms`` (default 30 ms), as an
agent's calls are separated by a model turn: that is when the sandbox prepares the next
command's sandbox. The "back to back" rows give no gap (the worst case: a sandbox is made
on demand). The table is printed and written into docs/sandbox.md between the
``bench:sandbox_latency`` markers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tether.guards.sandbox import BubblewrapSandbox, HostExecution, shell_tool
from tether.guards.sandbox._exec import execute
from tether.guards.sandbox.base import DEFAULT_ENV
from tether.tools import RunContext

DOC = Path(__file__).resolve().parent.parent / "docs" / "sandbox.md"
BEGIN, END = "<!-- bench:sandbox_latency -->", "<!-- /bench:sandbox_latency -->"
BARE = "bare `bwrap --ro-bind / / true`"
CTX: RunContext[None] = RunContext(deps=None)

Row = tuple[str, float, float, float, float]


async def main(runs: int, gap: float) -> list[Row]:
    box = BubblewrapSandbox()
    cold = BubblewrapSandbox(prepare=False)
    if not box.available():
        raise SystemExit("bubblewrap cannot isolate commands here (see docs/sandbox.md)")
    await box.open()
    await cold.open()
    host = HostExecution()
    tool, cold_tool = shell_tool(box), shell_tool(cold)

    async def bare() -> Any:
        argv = ["bwrap", "--ro-bind", "/", "/", "true"]
        return await execute(argv, timeout=30, max_chars=4000, env=DEFAULT_ENV)

    variants: dict[str, tuple[Callable[[], Awaitable[Any]], float]] = {
        BARE: (bare, gap),
        "HostExecution `true` (no isolation)": (lambda: host.run(["true"]), gap),
        "BubblewrapSandbox.run([`true`])": (lambda: box.run(["true"]), gap),
        "shell tool `true`": (lambda: tool.invoke({"command": "true"}, CTX), gap),
        "shell tool `true`, back to back": (lambda: tool.invoke({"command": "true"}, CTX), 0),
        "shell tool `true`, prepare=False": (
            lambda: cold_tool.invoke({"command": "true"}, CTX),
            gap,
        ),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for make, _ in variants.values():  # warm up
        await make()
    for _ in range(runs):
        for name, (make, pause) in variants.items():
            if pause:
                await asyncio.sleep(pause)
            started = time.perf_counter()
            await make()
            samples[name].append((time.perf_counter() - started) * 1000)
    for sandbox in (box, cold, host):
        await sandbox.aclose()
    bare_median = statistics.median(samples[BARE])
    return [
        (
            name,
            statistics.median(xs),
            min(xs),
            statistics.quantiles(xs, n=20)[-1],
            statistics.median(xs) / bare_median,
        )
        for name, xs in samples.items()
    ]


def table(rows: list[Row], runs: int, gap_ms: float) -> str:
    who = "root" if os.geteuid() == 0 else "a user"
    lines = [
        f"Median, minimum and 95th percentile of {runs} interleaved runs of `true`, in "
        f"milliseconds, and the median's ratio to bare bwrap ({os.cpu_count()} CPUs, run as "
        f"{who}, {gap_ms:g} ms idle before each call unless back to back).",
        "",
        "| variant | median ms | min ms | p95 ms | ratio to bare bwrap |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {name} | {med:.1f} | {low:.1f} | {p95:.1f} | {ratio:.2f} |"
        for name, med, low, p95, ratio in rows
    ]
    load = os.getloadavg()[0]
    lines += ["", f"Load average during the run: {load:.1f} on {os.cpu_count()} CPUs."]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--gap-ms", type=float, default=30.0)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    result = table(asyncio.run(main(args.runs, args.gap_ms / 1000)), args.runs, args.gap_ms)
    print(result)
    if not args.no_write and DOC.exists():
        text = DOC.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            DOC.write_text(f"{head}{BEGIN}\n{result}\n{END}{rest.split(END, 1)[1]}")
