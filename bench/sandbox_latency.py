"""Start latency of a sandboxed command: the median wall time of running ``true``.

Run: ``uv run python bench/sandbox_latency.py [--runs N]``. Every variant runs in the same
process, interleaved, so the ratios hold on any machine. The table is printed and written
into docs/sandbox.md between the ``bench:sandbox_latency`` markers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from tether.guards.sandbox import BubblewrapSandbox, HostExecution
from tether.guards.sandbox._exec import execute
from tether.guards.sandbox.base import DEFAULT_ENV
from tether.guards.sandbox.bwrap import _root_args

DOC = Path(__file__).resolve().parent.parent / "docs" / "sandbox.md"
BEGIN, END = "<!-- bench:sandbox_latency -->", "<!-- /bench:sandbox_latency -->"


def _drop(argv: list[str], flag: str, arity: int) -> list[str]:
    if flag not in argv:
        return argv
    i = argv.index(flag)
    return argv[:i] + argv[i + 1 + arity :]


async def main(runs: int) -> list[tuple[str, float, float, float]]:
    box = BubblewrapSandbox()
    if not box.available():
        raise SystemExit("bubblewrap is not installed or cannot create namespaces here")
    await box.open()
    host = HostExecution()
    full = box.argv(["true"], seccomp_fd=None)
    no_preamble = [*full[: full.index("--") + 1], "/usr/bin/true"]
    user = box.run_as

    async def raw(argv: list[str]) -> None:
        await execute(argv, timeout=30, max_chars=4000, env=DEFAULT_ENV, user=user, group=user)

    variants: dict[str, Callable[[], object]] = {
        "spawn `true` as nobody (no sandbox)": lambda: raw(["/usr/bin/true"]),
        "HostExecution (bash + ulimit, no isolation)": lambda: host.run(["true"]),
        "bwrap, user namespace only, /usr read-only": lambda: raw(
            ["bwrap", "--unshare-user", *_root_args(), "--", "/usr/bin/true"]
        ),
        "bwrap, all namespaces but network, all mounts": lambda: raw(
            _drop(no_preamble, "--unshare-net", 0)
        ),
        "bwrap, all namespaces and mounts": lambda: raw(no_preamble),
        "  + bash ulimit preamble": lambda: raw(full),
        "  + seccomp + info fd = BubblewrapSandbox.run": lambda: box.run(["true"]),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for make in variants.values():  # warm up
        await make()  # type: ignore[misc]
    for _ in range(runs):
        for name, make in variants.items():
            started = time.perf_counter()
            await make()  # type: ignore[misc]
            samples[name].append((time.perf_counter() - started) * 1000)
    await box.aclose()
    await host.aclose()
    return [
        (name, statistics.median(xs), min(xs), statistics.quantiles(xs, n=20)[-1])
        for name, xs in samples.items()
    ]


def table(rows: list[tuple[str, float, float, float]], runs: int) -> str:
    lines = [
        f"Median, minimum and 95th percentile of {runs} runs of `true`, in milliseconds "
        f"({os.cpu_count()} CPUs, bubblewrap, run as {'root' if os.geteuid() == 0 else 'a user'}).",
        "",
        "| variant | median ms | min ms | p95 ms |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {name.strip()} | {med:.1f} | {low:.1f} | {p95:.1f} |" for name, med, low, p95 in rows
    ]
    load = os.getloadavg()[0]
    lines += ["", f"Load average during the run: {load:.1f} on {os.cpu_count()} CPUs."]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    result = table(asyncio.run(main(args.runs)), args.runs)
    print(result)
    if not args.no_write and DOC.exists():
        text = DOC.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            DOC.write_text(f"{head}{BEGIN}\n{result}\n{END}{rest.split(END, 1)[1]}")
