"""What hostile text costs the guards: reading a 50,000-character tool result shaped to
stall a backtracking regex engine, against prose of the same length, in one run.

    uv run python bench/guard_scan.py

Each shape is read the way a run reads a third-party result: the call policy records it
(values, disguises undone, instruction flags, copy windows), and the first-generation taint
tracker scans it. The figure is the median of a few rounds; the ratio is blob / prose.
"""

from __future__ import annotations

import base64
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import machine, write_section
from tether.guards.callpolicy import ProvenancePolicy
from tether.guards.provenance import TaintTracker
from tether.guards.recording import ResultSource, record_result
from tether.guards.store import ProvenanceStore
from tether.messages import Message
from tether.tools import RunContext, tool

SIZE = 50_000
ROUNDS = 3
PROSE = (
    "Thanks for your order. The parcel left our warehouse on Monday and should reach you "
    "within three working days; the carrier will leave a note if nobody is home. "
)


@tool(thread=False, effect="read", third_party=("body",))
def read_mail() -> dict[str, Any]:
    """Read the latest mail."""
    return {}


def shapes() -> dict[str, str]:
    rng = random.Random(7)
    raw = bytes(rng.randrange(256) for _ in range(SIZE))
    return {
        "prose": (PROSE * (SIZE // len(PROSE) + 1))[:SIZE],
        "base64": base64.b64encode(raw).decode()[:SIZE],
        "hex": raw.hex()[: SIZE - 1],
        "letters, no spaces": "a" * SIZE,
        "letters and hyphens": "a-" * (SIZE // 2),
        "many @": "a@" * (SIZE // 2),
        "dots": "a." * (SIZE // 2),
        "digits": "7" * SIZE,
        "spaced letters": "a " * (SIZE // 2),
    }


def read_once(text: str) -> float:
    policy = ProvenancePolicy()
    ctx: RunContext[Any] = RunContext(None, "bench")
    policy.begin([Message.user("Summarise my mail")], ctx)
    content = json.dumps({"body": text})
    started = time.perf_counter()
    record_result(ProvenanceStore.of(ctx), ResultSource.of(read_mail), content)
    TaintTracker().tokens(content)
    return time.perf_counter() - started


def main() -> None:
    load_start = os.getloadavg()[0]
    timings = {
        name: statistics.median(read_once(t) for _ in range(ROUNDS)) for name, t in shapes().items()
    }
    load_end = os.getloadavg()[0]
    prose = timings["prose"]
    rows = [
        f"| {name} | {seconds * 1000:.0f} ms | {seconds / prose:.1f}x |"
        for name, seconds in timings.items()
    ]
    worst = max(v / prose for k, v in timings.items() if k != "prose")
    table = "\n".join(
        [
            "## Guards on hostile text (`bench/guard_scan.py`)",
            "",
            f"{machine()}; load average {load_start:.1f} at the start, {load_end:.1f} at "
            "the end (the machine is shared: other work ran on its cores).",
            f"One command: `uv run python bench/guard_scan.py`. A {SIZE:,}-character "
            "third-party result recorded by the call policy and scanned by the taint "
            f"tracker, median of {ROUNDS} rounds.",
            "",
            "| shape | time to read | ratio to prose |",
            "| --- | --- | --- |",
            *rows,
            "",
            f"Worst blob / prose: **{worst:.1f}x** (target: a small constant; before "
            "linear-time matching one such blob took 91 s against well under a second for "
            "prose). Results over 8,000 characters are read in a worker thread before the "
            "next ruling, so the event loop never waits for them.",
        ]
    )
    print(table)
    write_section("guard_scan", table)


if __name__ == "__main__":
    main()
