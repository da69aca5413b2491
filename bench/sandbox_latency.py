"""The shell tool against a bare bubblewrap, side by side: back to back, in bursts, and the
event loop's lag while another session floods binary output.

Run: ``uv run python bench/sandbox_latency.py [--rounds N]``. Everything runs in one
process, interleaved round by round (which goes first alternates), so the ratios to bare
bwrap hold on a loaded machine:

- **back to back**: a stream of ``--stream`` calls with no pause, bare
  ``bwrap --ro-bind / / true`` against the shell tool's ``true``; the median per call;
- **sustained**: the same with ``--sustained`` calls, longer than the pool is deep; the
  median per call, and the mean (the stream's throughput: a pool refilled in batches
  makes most calls fast and a few slow, which the median alone hides);
- **bursts**: a turn of 4 parallel calls (the wall time until all 4 are done), then a
  pause of ``--gap-ms`` (a model turn);
- **flood**: while another sandbox session runs ``cat /dev/urandom`` for ``--flood-s``
  seconds, a probe asks the event loop for a 5 ms sleep over and over and records how
  late it wakes (the lag), and this session runs ``echo`` (its latency).

The table is printed and written into docs/benchmarks.md between the
``sandbox-latency`` markers.
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

from tether.guards.sandbox import BubblewrapSandbox, SandboxLimits, shell_tool
from tether.guards.sandbox._exec import execute
from tether.guards.sandbox.base import DEFAULT_ENV
from tether.tools import RunContext

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
BEGIN, END = "<!-- sandbox-latency:start -->", "<!-- sandbox-latency:end -->"
CTX: RunContext[None] = RunContext(deps=None)
PROBE_S = 0.005

Call = Callable[[], Awaitable[Any]]


async def bare() -> Any:
    argv = ["bwrap", "--ro-bind", "/", "/", "true"]
    return await execute(argv, timeout=30, max_chars=4000, env=DEFAULT_ENV)


async def timed(call: Call) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1000


async def stream(call: Call, length: int) -> list[float]:
    return [await timed(call) for _ in range(length)]


async def burst(call: Call, width: int) -> float:
    started = time.perf_counter()
    await asyncio.gather(*(call() for _ in range(width)))
    return (time.perf_counter() - started) * 1000


async def probe_lag(until: float) -> list[float]:
    """How late the event loop wakes a 5 ms sleep, in ms, until ``until``."""
    lags = []
    while time.perf_counter() < until:
        asked = time.perf_counter()
        await asyncio.sleep(PROBE_S)
        lags.append(max(0.0, (time.perf_counter() - asked - PROBE_S) * 1000))
    return lags


async def flood(tool: Call, seconds: float) -> tuple[list[float], list[float], str]:
    """Lag and ``echo`` latency while another session floods binary output."""
    other = BubblewrapSandbox(limits=SandboxLimits(timeout_seconds=seconds))
    async with other:
        flooding = asyncio.ensure_future(other.run(["cat", "/dev/urandom"]))
        await asyncio.sleep(0.2)  # the flood is under way
        until = time.perf_counter() + seconds - 0.5
        lags = asyncio.ensure_future(probe_lag(until))
        echoes = []
        while time.perf_counter() < until:
            echoes.append(await timed(tool))
            await asyncio.sleep(0.03)
        result = await flooding
    return await lags, echoes, f"{result.stdout_omitted / 2**20:,.0f} MiB"


def summary(xs: list[float]) -> tuple[float, float, float]:
    return statistics.median(xs), min(xs), statistics.quantiles(xs, n=20)[-1]


async def main(
    rounds: int, length: int, sustained: int, gap: float, flood_s: float
) -> dict[str, Any]:
    box = BubblewrapSandbox()
    if not box.available():
        raise SystemExit("bubblewrap cannot isolate commands here (see docs/sandbox.md)")
    await box.open()
    tool = shell_tool(box)

    async def shell() -> Any:
        return await tool.invoke({"command": "true"}, CTX)

    async def between_turns() -> None:
        """A model turn: the pool refills (not counted against the next variant), then
        ``gap`` of idle time."""
        await box.prepared()
        await asyncio.sleep(gap)

    await shell()
    await bare()
    rows: dict[str, list[float]] = {
        "b2b bare": [],
        "b2b tool": [],
        "long bare": [],
        "long tool": [],
        "burst bare": [],
        "burst tool": [],
    }
    for index in range(rounds):
        order = [("bare", bare), ("tool", shell)]
        if index % 2:
            order.reverse()
        for name, call in order:
            await between_turns()
            rows[f"b2b {name}"] += await stream(call, length)
        for name, call in order:
            await between_turns()
            rows[f"long {name}"] += await stream(call, sustained)
        for name, call in order:
            await between_turns()
            rows[f"burst {name}"].append(await burst(call, 4))
    quiet = await probe_lag(time.perf_counter() + 1.0)
    lags, echoes, flooded = await flood(shell, flood_s)
    await box.aclose()
    return {"rows": rows, "quiet": quiet, "lags": lags, "echoes": echoes, "flooded": flooded}


def table(data: dict[str, Any], rounds: int, length: int, sustained: int, gap_ms: float) -> str:
    rows = data["rows"]
    b2b = statistics.median(rows["b2b tool"]) / statistics.median(rows["b2b bare"])
    bursts = statistics.median(rows["burst tool"]) / statistics.median(rows["burst bare"])
    lag_p95 = statistics.quantiles(data["lags"], n=20)[-1]
    load = os.getloadavg()
    who = "root" if os.geteuid() == 0 else "a user"
    lines = [
        "## Sandboxed shell latency (`bench/sandbox_latency.py`)",
        "",
        f"{os.cpu_count()} CPUs, run as {who}, **loaded by other work**: load average "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min) at the end of the "
        f"run. {rounds} interleaved rounds (which goes first alternates); each round: a "
        f"stream of {length} calls back to back, a burst of 4 parallel calls and a "
        f"stream of {sustained} calls, for "
        f"bare `bwrap --ro-bind / / true` and for the shell tool's `true` (a "
        f"`BubblewrapSandbox` with its default pool of prepared sandboxes), "
        f"{gap_ms:g} ms apart. Milliseconds.",
        "",
        "| measure | bare bwrap median | shell tool median | tool min / p95 | ratio | target |",
        "|---|---:|---:|---:|---:|---|",
    ]
    long = statistics.median(rows["long tool"]) / statistics.median(rows["long bare"])
    for label, key, ratio, target in (
        (f"back to back, {length} calls in a row, per call", "b2b", b2b, True),
        ("burst of 4 parallel calls, whole turn", "burst", bursts, True),
        (f"sustained: {sustained} calls in a row, per call", "long", long, True),
    ):
        med_b = statistics.median(rows[f"{key} bare"])
        med, low, p95 = summary(rows[f"{key} tool"])
        verdict = ("<= 1.5: " + ("met" if ratio <= 1.5 else "**not met**")) if target else ""
        lines.append(
            f"| {label} | {med_b:.1f} | {med:.1f} | {low:.1f} / {p95:.1f} | {ratio:.2f} | "
            f"{verdict} |"
        )
    mean_b, mean_t = statistics.mean(rows["long bare"]), statistics.mean(rows["long tool"])
    lines.append(
        f"| sustained: the same, mean per call (throughput) | {mean_b:.1f} | {mean_t:.1f} | | "
        f"{mean_t / mean_b:.2f} | |"
    )
    quiet, lags, echoes = data["quiet"], data["lags"], data["echoes"]
    q_med, _, q_p95 = summary(quiet)
    l_med, _, _ = summary(lags)
    e_med, _, e_p95 = summary(echoes)
    verdict = "met" if lag_p95 <= 20 else "**not met**"
    lines += [
        "",
        "| while another session runs `cat /dev/urandom` | median | p95 | target |",
        "|---|---:|---:|---|",
        f"| event-loop lag (5 ms sleeps), no flood | {q_med:.2f} | {q_p95:.2f} | |",
        f"| event-loop lag (5 ms sleeps), flood ({data['flooded']} read and counted) "
        f"| {l_med:.2f} | {lag_p95:.2f} | p95 <= 20: {verdict} |",
        f"| shell tool `echo` during the flood | {e_med:.1f} | {e_p95:.1f} | |",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--stream", type=int, default=5, help="calls per back-to-back stream")
    parser.add_argument("--sustained", type=int, default=20, help="calls per long stream")
    parser.add_argument("--gap-ms", type=float, default=30.0)
    parser.add_argument("--flood-s", type=float, default=5.0)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    data = asyncio.run(
        main(args.rounds, args.stream, args.sustained, args.gap_ms / 1000, args.flood_s)
    )
    result = table(data, args.rounds, args.stream, args.sustained, args.gap_ms)
    print(result)
    if not args.no_write and DOC.exists():
        text = DOC.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            DOC.write_text(f"{head}{BEGIN}\n{result}\n{END}{rest.split(END, 1)[1]}")
        else:
            DOC.write_text(f"{text.rstrip()}\n\n{BEGIN}\n{result}\n{END}\n")
