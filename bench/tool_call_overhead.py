"""Per-call cost of running a tool: the function itself, an async tool, a sync tool inline
(``thread=False``), a sync tool on tether's worker threads, and the ``asyncio.to_thread``
hop for comparison, in one interleaved run.

    uv run python bench/tool_call_overhead.py

Each round times a batch of calls of every kind back to back; the figure is the median
over rounds of (batch time / calls), so a busy moment hits every kind alike. The tool body
is the same trivial function everywhere: the numbers are the cost of getting there.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import machine, write_section
from tether import RunContext, tool
from tether._workers import run_in_worker
from tether.messages import ToolCall

ROUNDS = 25
CALLS = 400


def body(n: int) -> str:
    return f"record {n}"


@tool
async def async_tool(n: Annotated[int, "Record."]) -> str:
    """Read a record."""
    return body(n)


@tool(thread=False)
def inline_tool(n: Annotated[int, "Record."]) -> str:
    """Read a record."""
    return body(n)


@tool
def thread_tool(n: Annotated[int, "Record."]) -> str:
    """Read a record."""
    return body(n)


def context() -> RunContext[None]:
    return RunContext(None, "bench", ToolCall("c1", "t", {"n": 1}))


async def direct(n: int) -> str:
    return body(n)


async def to_thread(n: int) -> str:
    return await asyncio.to_thread(body, n)


async def worker(n: int) -> str:
    return await run_in_worker(body, n=n)


def invoke(t: Any) -> Callable[[int], Awaitable[str]]:
    ctx = context()

    async def call(n: int) -> str:
        text: str = await t.invoke({"n": n}, ctx)
        return text

    return call


KINDS: dict[str, Callable[[int], Awaitable[str]]] = {
    "the function, called directly": direct,
    "async tool (`tool.invoke`)": invoke(async_tool),
    "sync tool, inline (`thread=False`)": invoke(inline_tool),
    "sync tool, worker thread (default)": invoke(thread_tool),
    "bare hop: tether worker thread": worker,
    "bare hop: `asyncio.to_thread`": to_thread,
}


async def batch(call: Callable[[int], Awaitable[str]]) -> float:
    start = time.perf_counter()
    for n in range(CALLS):
        await call(n)
    return (time.perf_counter() - start) / CALLS


async def measure() -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in KINDS}
    for call in KINDS.values():  # warm up: threads started, validators built
        await batch(call)
    for _ in range(ROUNDS):
        for name, call in KINDS.items():
            samples[name].append(await batch(call))
    return {k: statistics.median(v) * 1e6 for k, v in samples.items()}


def main() -> None:
    results = asyncio.run(measure())
    base = results["the function, called directly"]
    rows = "\n".join(f"| {name} | {us:.1f} | {us - base:.1f} |" for name, us in results.items())
    table = f"""## Per-call cost of a tool (`bench/tool_call_overhead.py`)

Machine: {machine()}. Median over {ROUNDS} interleaved rounds of {CALLS} calls each;
the body is the same trivial function in every row.

| how the call runs | µs per call | over the direct call (µs) |
|---|---|---|
{rows}

A sync tool runs on a worker thread by default so that a slow body cannot block the event
loop (and so that a run can stop at its wall-time limit while the body runs on). That hop is
the bulk of a sync tool's cost; a quick function that never blocks declares
`@tool(thread=False)` and runs inline, at the cost of an async tool. tether's own worker
threads (daemon threads, reused while idle) replace `asyncio.to_thread`, whose executor the
event loop waits for at shutdown.
"""
    print(table)
    write_section("tool-call-overhead", table)
    print("written to docs/benchmarks.md")


if __name__ == "__main__":
    main()
