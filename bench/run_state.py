"""What a sealed run state costs to save, load and verify, at 20 and 2,000 messages.

    uv run python bench/run_state.py

A run pauses for approval after N messages (read calls, then a refund). Measured on a
SQLite file through ``SqlStateStore``, median of several repeats:

- first save: the run's first state (every message is new: it grows with N);
- next save: the state after one more approval round (two new messages) stored under the
  resume's lease; the target is that it costs what changed, not the run's length;
- load: reading the state back with the store that saved it (it keeps the run's messages
  parsed and reads only new ones);
- cold load: the same from a fresh store, as another process would (every message is read,
  hashed as stored and parsed: it grows with N; the history is not re-checked);
- verify: ``Agent.resume``'s check of a loaded state (seal, agent, pending calls);
- from_json: reading the state from JSON text (seal over every message, then parse).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sqlalchemy import create_engine

from _report import machine, write_section
from tether import Agent, Limits
from tether.providers.scripted import ScriptedClient, call_reply
from tether.run_state import RunState
from tether.sql_state_store import SqlStateStore
from tether.state_gate import open_state
from tether.state_seal import StateKeys
from tether.tools import tool

SIZES = (20, 2000)
REPEATS = 7
KEYS = StateKeys.generate("bench")


@tool(thread=False, effect="read")
def read_order(order: Annotated[str, "Order number."]) -> str:
    """Read an order. Changes nothing."""
    return f"{order}: delivered, 89.90 paid, two items, shipped from the Lyon warehouse"


@tool(requires_approval=True, thread=False, effect="money")
def refund(amount: Annotated[float, "Amount in euros."]) -> str:
    """Refund the order. Irreversible."""
    return f"refunded {amount}"


def agent(messages: int) -> Agent[None]:
    reads = (messages - 2) // 2
    script: list[Any] = [call_reply(("read_order", {"order": f"C-{i:04d}"})) for i in range(reads)]
    script += [call_reply(("refund", {"amount": 9.0})), call_reply(("refund", {"amount": 5.0}))]
    return Agent(
        ScriptedClient(script),
        [read_order, refund],
        limits=Limits(max_turns=reads + 5),
        state_key=KEYS,
    )


async def measure(messages: int, folder: Path) -> dict[str, float]:
    names = ("first", "next", "load", "cold", "verify", "json")
    times: dict[str, list[float]] = {k: [] for k in names}
    clock = time.perf_counter
    for i in range(REPEATS):
        store = SqlStateStore(create_engine(f"sqlite:///{folder / f'{messages}-{i}.db'}"))
        a = agent(messages)
        first = await a.run("refund me")
        state = first.state
        assert state is not None and len(state.transcript) == messages, len(state.transcript)
        t0 = clock()
        await store.save(state)
        t1 = clock()
        got = await store.load(first.run_id)
        t2 = clock()
        assert got is not None
        open_state(got, a.state_keys, a.fingerprint)
        t3 = clock()
        cold_store = SqlStateStore(store.engine)
        c0 = clock()
        assert await cold_store.load(first.run_id) == got
        cold = clock() - c0
        text = state.to_json()
        t4 = clock()
        RunState.from_json(text, keys=KEYS)
        t5 = clock()
        lease = await store.claim(got.run_id, got.version)
        assert lease is not None
        nxt = await a.resume(got, [got.pending[0].approve()])
        assert nxt.state is not None and len(nxt.state.transcript) == messages + 2
        t6 = clock()
        await store.finish(lease, nxt.state)
        t7 = clock()
        for key, seconds in zip(
            times, (t1 - t0, t7 - t6, t2 - t1, cold, t3 - t2, t5 - t4), strict=True
        ):
            times[key].append(seconds)
    return {k: statistics.median(v) * 1000 for k, v in times.items()}


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = {n: await measure(n, Path(tmp)) for n in SIZES}
    small, large = rows[SIZES[0]], rows[SIZES[-1]]
    load = os.getloadavg()[0]
    labels = {
        "first": "first save (all messages new)",
        "next": "next save under the lease (2 new messages)",
        "load": "load by the store that saved it",
        "cold": "cold load (another process: parse every message)",
        "verify": "verify a loaded state at resume",
        "json": "from_json (seal over every message)",
    }
    lines = [
        "## Sealed run state: save, load, verify (`bench/run_state.py`)",
        "",
        f"Machine: {machine()}; load average {load:.1f} when run (shared, loaded by other work).",
        "Median of 7 runs, SQLite file, milliseconds.",
        "",
        f"| operation | {SIZES[0]} messages | {SIZES[-1]} messages | ratio |",
        "|---|---:|---:|---:|",
    ]
    for key, label in labels.items():
        ratio = large[key] / small[key] if small[key] else float("nan")
        lines.append(f"| {label} | {small[key]:.2f} | {large[key]:.2f} | {ratio:.1f}x |")
    table = "\n".join(lines)
    print(table)
    if "--no-write" not in sys.argv:
        write_section("run_state", table)


if __name__ == "__main__":
    asyncio.run(main())
