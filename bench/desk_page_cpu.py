"""Server CPU per inbox page and per search, fast: ``uv run python bench/desk_page_cpu.py``.

``tether serve`` (durable, its default) on the 10,000-ticket database of ``bench/desk.py``
(made once with ``--db PATH`` and reused); a few keep-alive clients, logged in as staff,
ask pages back to back; the server process's CPU time over the requests, per request.
Latency under load is about (clients x this), so it is the figure to lower.

``--profile FILE`` also runs cProfile in the server's main thread (the event loop) over
the measured requests only (switched on and off by signals) and prints where the time
goes; the stats are left in FILE for ``python -m pstats``. About 20 s per kind of page
without ``--profile``. ``--against REV`` measures REV's desk the same way, alternately,
``--rounds N`` times: on shared cores the CPU time per request moves with the load, so
compare the medians (and the least, the figure least disturbed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "desk"))

from desk_server import Served, free_port

from _report import export
from desk import DRIVER, INBOX_TICKETS, Client, _search_path, cpu_seconds, driver, login

PROFILED = """
import cProfile, signal, sys
out, profiles = sys.argv.pop(1), []
def start(*_):
    profiles.append(cProfile.Profile())
    profiles[-1].enable()
def dump(*_):
    profiles[-1].disable()
    profiles[-1].dump_stats(f"{out}.{len(profiles)}")
signal.signal(signal.SIGUSR1, start)
signal.signal(signal.SIGUSR2, dump)
from tether.cli import main
main()
"""
PLAIN = "from tether.cli import main; main()"


@contextmanager
def server(db: Path, src: Path | None, profile: Path | None) -> Iterator[Served]:
    """``tether serve`` on ``db`` (``src``: another revision's desk), until the block ends."""
    import socket

    port = free_port()
    code = [PROFILED, str(profile)] if profile else [PLAIN]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    process = subprocess.Popen(
        [sys.executable, "-c", *code, "serve", "--db", str(db), "--model", "scripted",
         "--port", str(port)],
        stdout=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, "tether serve exited"
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    try:
        yield Served(f"http://127.0.0.1:{port}", process)  # type: ignore[arg-type]
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)


async def measure(
    served: Served, path: Callable[[int, int], str], requests: int, clients: int, profiled: bool
) -> float:
    """Server CPU milliseconds per request over ``requests`` requests."""
    port = int(served.url.rsplit(":", 1)[1])
    cookie = await login(served.url)
    pool = [Client(port, cookie) for _ in range(clients)]
    for n, c in enumerate(pool):
        await c.open()
        for i in range(20):  # warm: imports, templates, statements, caches
            await c.get(path(n, i))
    each = requests // clients

    async def ask(n: int, c: Client) -> None:
        for i in range(each):
            status, body = await c.get(path(n, i))
            assert status == 200, (status, body[:200])

    if profiled:
        served.process.send_signal(signal.SIGUSR1)
        await asyncio.sleep(0.2)
    cpu0 = cpu_seconds(served.process.pid)
    await asyncio.gather(*(ask(n, c) for n, c in enumerate(pool)))
    cpu = cpu_seconds(served.process.pid) - cpu0
    if profiled:
        served.process.send_signal(signal.SIGUSR2)
        await asyncio.sleep(1)
    for c in pool:
        c.close()
    return cpu / (each * clients) * 1000


def inbox_path(n: int, i: int) -> str:
    return f"/staff/inbox?page={1 + (n * 7 + i) % 400}"


KINDS = {"inbox": inbox_path, "search": _search_path}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", type=Path, help="the 10,000-ticket database (made if missing)")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", choices=tuple(KINDS))
    parser.add_argument("--against", metavar="REV")
    parser.add_argument("--profile", type=Path, metavar="FILE")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="desk-page-") as tmp:
        db = args.db or Path(tmp) / "inbox.db"
        if not db.exists():
            driver(None, "inbox-db", db, INBOX_TICKETS)
        sides: dict[str, Path | None] = {}
        if args.against:
            sides["before"] = export(args.against, Path(tmp))
        sides["after"] = None
        kinds = [args.only] if args.only else list(KINDS)
        load0 = os.getloadavg()[0]
        seen: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            for name, src in sides.items():
                profile = args.profile if name == "after" else None
                with server(db, src, profile) as served:
                    for kind in kinds:
                        ms = asyncio.run(
                            measure(served, KINDS[kind], args.requests, args.clients,
                                    profile is not None)
                        )  # fmt: skip
                        print(f"round {r + 1} {name}: {kind} {ms:.3f} ms server CPU/request")
                        seen.setdefault((name, kind), []).append(ms)
        print(f"load average {load0:.1f} to {os.getloadavg()[0]:.1f}; driver {DRIVER.name}")
        for (name, kind), values in seen.items():
            print(
                f"{name} {kind}: median {statistics.median(values):.3f} ms, "
                f"least {min(values):.3f} ms server CPU/request over {len(values)} rounds"
            )
    if args.profile:
        for n, kind in enumerate(kinds, 1):
            path = Path(f"{args.profile}.{n}")
            if path.exists():
                print(f"--- {kind}")
                pstats.Stats(str(path)).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
