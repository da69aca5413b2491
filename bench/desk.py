"""The support desk under load, in one command: ``uv run python bench/desk.py``.

1. **Pipeline**: 1,000 refund tickets end to end on SQLite with the desk's scripted model
   (open -> triage -> refund agent -> approval stored -> staff decision -> run resumed ->
   ledger -> draft -> sent), one after another: tickets per second, p50/p95 per ticket
   (wall and CPU), statements and transactions per ticket, and where the time goes (a
   profiled pass: tether's runtime, the desk, SQLAlchemy, the SQLite driver).
   The same tickets **durably**, as ``tether serve`` runs them by default (a
   ``DurableDesk`` on SQLite, its queue and workflows in the process, the console's side
   in the same process approving each refund as it waits and sending each draft), in
   batches interleaved with the plain ones: tickets per second, CPU per ticket (the whole
   process over the batch) and its ratio to the plain pipeline's, where the CPU goes.
2. **Inbox**: ``tether serve`` on a database of 10,000 tickets; 50 clients, each logged in
   as staff on its own keep-alive connection, ask inbox pages back to back (each asks its
   next page as soon as the last one arrives): p50/p95, pages per second, and the CPU time
   per page of the server and of the clients; then, from the same server, searches (the
   tickets have threads: every third one a customer reply and a staff note). Then the
   inbox while 1,000 refund tickets run through the server's durable queue (a console
   process approving them).

``--only inbox`` measures the inbox and search alone (about 3 minutes with ``--against``;
its own section ``desk-inbox``); ``--only flow [--flow N]`` the inbox while N tickets
flow (printed). The default runs everything, as before.

``--against REV`` runs the same measures on another revision's desk (its ``src`` exported
with ``git archive``) in the same run, interleaved round by round with this tree's, so the
machine's load falls on both alike: the table then has a *before* column.
``--only plain`` measures the plain pipeline alone (``--tickets N`` per side, default
1,000) and prints its rows without writing docs/benchmarks.md.

Targets: plain >= 100 tickets/s, <= 10 ms framework + database per ticket at p50; durable
>= 50 tickets/s, CPU per ticket <= 2x plain; inbox p95 <= 100 ms, also while tickets
flow. The model is scripted, so the pipeline's time is the framework's and the
database's. Results go to docs/benchmarks.md (section ``desk``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "desk"))

from desk_server import serve

from _report import export, machine, run_side, write_section

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

DRIVER = HERE / "_desk_driver.py"
TICKETS = 1_000
ROUNDS = 4
INBOX_TICKETS = 10_000
CLIENTS = 50
REQUESTS_PER_CLIENT = 40
INBOX_ROUNDS = 3
FLOW = 1_000


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def driver(src: Path | None, *args: object) -> dict[str, Any]:
    """Run the driver on this tree (``src`` None) or on an exported revision's src."""
    return run_side(DRIVER, src, *args)


def pipeline(
    sides: dict[str, Path | None], *, tickets: int = TICKETS, plain_only: bool = False
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each side's timed batches, plain and durable, interleaved round by round, then its
    counts and profiles; and each round's figures with the load average at its start.
    ``plain_only``: the plain pipeline alone (no durable batch)."""
    timed: dict[str, dict[str, list[float]]] = {k: {"wall": [], "cpu": []} for k in sides}
    seconds = dict.fromkeys(sides, 0.0)
    durable: dict[str, list[dict[str, Any]]] = {k: [] for k in sides}
    rounds: list[str] = []
    for r in range(ROUNDS):
        for name, src in sides.items():
            load = os.getloadavg()[0]
            got = driver(src, "pipeline", tickets // ROUNDS, "time")
            timed[name]["wall"] += got["wall"]
            timed[name]["cpu"] += got["cpu"]
            seconds[name] += got["seconds"]
            if plain_only:
                line = (
                    f"{name} round {r + 1}, load {load:.1f}: plain {got['n'] / got['seconds']:.0f}"
                    f"/s {sum(got['cpu']) / got['n'] * 1000:.1f} ms CPU"
                )
                rounds.append(line)
                print(line)
                continue
            d = driver(src, "durable", tickets // ROUNDS, "time")
            durable[name].append(d)
            line = (
                f"{name} round {r + 1}, load {load:.1f}: plain {got['n'] / got['seconds']:.0f}"
                f"/s {sum(got['cpu']) / got['n'] * 1000:.1f} ms CPU, durable "
                f"{d['n'] / d['seconds']:.0f}/s {d['cpu_ms']:.1f} ms CPU"
            )
            rounds.append(line)
            print(line)
    out: dict[str, dict[str, Any]] = {}
    for name, src in sides.items():
        wall, cpu = timed[name]["wall"], timed[name]["cpu"]
        counts = driver(src, "pipeline", 200, "count")
        shares = driver(src, "pipeline", 200, "profile")["shares"]
        out[name] = {
            "tickets_per_s": len(wall) / seconds[name],
            "p50_ms": pct(wall, 0.5) * 1000,
            "p95_ms": pct(wall, 0.95) * 1000,
            "cpu_p50_ms": pct(cpu, 0.5) * 1000,
            "cpu_mean_ms": sum(cpu) / len(cpu) * 1000,
            "statements": counts["statements"],
            "transactions": counts["transactions"],
            "shares": shares,
        }
        if plain_only:
            continue
        runs = durable[name]
        n = sum(d["n"] for d in runs)
        out[name]["durable_per_s"] = n / sum(d["seconds"] for d in runs)
        out[name]["durable_cpu_ms"] = sum(d["cpu_ms"] * d["n"] for d in runs) / n
        out[name]["durable_shares"] = driver(src, "durable", 100, "profile")["shares"]
        out[name].update(durable_counts(driver(src, "durable", 100, "count")))
        out[name]["durable_ratio"] = out[name]["durable_cpu_ms"] / out[name]["cpu_mean_ms"]
    return out, rounds


def durable_counts(got: dict[str, Any]) -> dict[str, float]:
    """Logged operations of one refund ticket's workflows, and statements per ticket on the
    durable log and on the desk's database."""
    return {
        "durable_steps": sum(got["steps"].values()),
        "durable_log_statements": got["log"]["statements"],
        "durable_desk_statements": got["desk"]["statements"],
    }


class Client:
    """A keep-alive HTTP/1.1 client that sends a fixed request and reads the response by
    its Content-Length: a few microseconds of CPU per page, so the server, not the client,
    is what is measured on the shared cores."""

    def __init__(self, port: int, cookie: str) -> None:
        self.port = port
        self.cookie = cookie

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def get(self, path: str) -> tuple[int, bytes]:
        head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {self.cookie}\r\n\r\n"
        self.writer.write(head.encode())
        raw = await self.reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", raw)
        assert length is not None, raw[:200]
        return int(raw[9:12]), await self.reader.readexactly(int(length.group(1)))

    def close(self) -> None:
        self.writer.close()


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and its children still running (uvicorn's workers)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(entry.name) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


async def login(url: str) -> str:
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=60) as c:
        page = (await c.get("/login")).text
        token = re.search(r'name="csrftoken" value="([^"]+)"', page)
        assert token is not None
        form = {"email": "camille@desk.example", "password": "camille-demo"}
        r = await c.post("/login", data={**form, "csrftoken": token.group(1)})
        assert r.status_code == 303, r.text[:200]
        return "; ".join(f"{k}={v}" for k, v in c.cookies.items())


SEARCHES = ("commande", "chargeur", "ref{n}", "colis abime", "char", '"ref1" OR NEAR(*')
"""Every ticket says "commande", one in ten "chargeur", one "refN"; two words; a prefix;
query syntax (taken as words)."""


async def clients_run(
    served: Any, cookie: str, path: Any, check: bytes
) -> tuple[list[float], float, float]:
    """CLIENTS clients ask ``path(client, i)`` back to back, REQUESTS_PER_CLIENT each:
    the latencies, and the server's and the clients' CPU seconds."""
    port = int(served.url.rsplit(":", 1)[1])
    clients = [Client(port, cookie) for _ in range(CLIENTS)]
    latencies: list[float] = []
    for n, c in enumerate(clients):
        await c.open()
        await c.get(path(n, 0))  # warm: templates, statements, connections

    async def ask(n: int, c: Client) -> None:
        for i in range(REQUESTS_PER_CLIENT):
            t0 = time.perf_counter()
            status, body = await c.get(path(n, i))
            latencies.append(time.perf_counter() - t0)
            assert status == 200 and check in body, (status, path(n, i))

    server0, client0 = cpu_seconds(served.process.pid), time.process_time()
    await asyncio.gather(*(ask(n, c) for n, c in enumerate(clients)))
    server = cpu_seconds(served.process.pid) - server0
    client = time.process_time() - client0
    for c in clients:
        c.close()
    return latencies, server, client


def _search_path(n: int, i: int) -> str:
    q = SEARCHES[(n + i) % len(SEARCHES)].format(n=(n * 97 + i) % INBOX_TICKETS)
    return "/staff/search?" + urlencode({"q": q})


async def inbox_run(db: Path, src: Path | None, workers: int = 1) -> dict[str, Any]:
    """Inbox pages, then (where the desk has search) searches, from the same server."""
    env = {"PYTHONPATH": str(src)} if src else None
    args = ("--workers", str(workers)) if workers > 1 else ()
    with serve(str(db), model="scripted", env=env, args=args) as served:
        cookie = await login(served.url)  # one login (argon2), shared by the clients
        t0 = time.perf_counter()
        latencies, server, client = await clients_run(
            served, cookie, lambda n, i: f"/staff/inbox?page={1 + (n * 7 + i) % 400}", b"Ticket"
        )
        wall = time.perf_counter() - t0
        found = await _has_search(served.url, cookie)
        searched = await clients_run(served, cookie, _search_path, b"</main>") if found else None
    n = len(latencies)
    out: dict[str, Any] = {
        "latencies": latencies,
        "pages_per_s": n / wall,
        "server_cpu_ms": server / n * 1000,
        "client_cpu_ms": client / n * 1000,
    }
    if searched is not None:
        out["search"] = searched[0]
        out["search_cpu_ms"] = searched[1] / len(searched[0]) * 1000
    return out


async def _has_search(url: str, cookie: str) -> bool:
    import httpx

    async with httpx.AsyncClient(base_url=url, headers={"cookie": cookie}) as c:
        return (await c.get("/staff/search?q=commande")).status_code == 200


Rounds = list[tuple[float, dict[str, float]]]


def inbox(tmp: Path, sides: dict[str, Path | None]) -> tuple[dict[str, dict[str, Any]], Rounds]:
    """Each side (and this tree with two worker processes), round by round; each round's
    load average at its start and p95 per run."""
    runs_of = {name: (src, 1) for name, src in sides.items()}
    runs_of["workers"] = (None, 2)
    dbs = {}
    for name, (src, _) in runs_of.items():
        dbs[name] = tmp / f"inbox-{name}.db"
        driver(src, "inbox-db", dbs[name], INBOX_TICKETS)
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in runs_of}
    rounds: Rounds = []
    for r in range(INBOX_ROUNDS):
        rounds.append((os.getloadavg()[0], {}))
        for name, (src, workers) in runs_of.items():
            got = asyncio.run(inbox_run(dbs[name], src, workers))
            rounds[-1][1][name] = pct(got["latencies"], 0.95) * 1000
            runs[name].append(got)
            p95 = pct(got["latencies"], 0.95) * 1000
            search = got.get("search")
            found = f", search p95 {pct(search, 0.95) * 1000:.0f} ms" if search else ""
            print(f"inbox round {r + 1}/{INBOX_ROUNDS} {name}: p95 {p95:.0f} ms{found}")
    out = {}
    for name, got in runs.items():
        latencies = [x for g in got for x in g["latencies"]]
        out[name] = {
            "p50_ms": pct(latencies, 0.5) * 1000,
            "p95_ms": pct(latencies, 0.95) * 1000,
            "pages_per_s": sum(g["pages_per_s"] for g in got) / len(got),
            "server_cpu_ms": sum(g["server_cpu_ms"] for g in got) / len(got),
            "client_cpu_ms": sum(g["client_cpu_ms"] for g in got) / len(got),
        }
        searched = [x for g in got for x in g.get("search", [])]
        if searched:
            out[name]["search_p50_ms"] = pct(searched, 0.5) * 1000
            out[name]["search_p95_ms"] = pct(searched, 0.95) * 1000
            out[name]["search_cpu_ms"] = sum(g["search_cpu_ms"] for g in got) / len(got)
    return out, rounds


async def inbox_flowing(tmp: Path, flow: int = FLOW) -> dict[str, Any]:
    """The inbox while FLOW refund tickets run through `tether serve`'s durable queue:
    the clients ask pages back to back until a console process (the driver's ``flow``)
    has opened the tickets and approved every refund and every ticket has its draft."""
    db = tmp / "inbox-flow.db"
    driver(None, "inbox-db", db, INBOX_TICKETS)
    latencies: list[float] = []
    with serve(str(db), model="scripted") as served:
        port = int(served.url.rsplit(":", 1)[1])
        cookie = await login(served.url)
        clients = [Client(port, cookie) for _ in range(CLIENTS)]
        for c in clients:
            await c.open()
            await c.get("/staff/inbox")
        console = await asyncio.create_subprocess_exec(
            sys.executable, str(DRIVER), "flow", str(db), str(flow),
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        flowing = asyncio.ensure_future(console.communicate())
        server0 = cpu_seconds(served.process.pid)
        t0 = time.perf_counter()

        async def ask(n: int, c: Client) -> None:
            i = 0
            while not flowing.done():
                t = time.perf_counter()
                status, body = await c.get(f"/staff/inbox?page={1 + (n * 7 + i) % 400}")
                latencies.append(time.perf_counter() - t)
                assert status == 200 and b"<table" in body, status  # new tickets come first
                i += 1

        await asyncio.gather(*(ask(n, c) for n, c in enumerate(clients)))
        wall = time.perf_counter() - t0
        server = cpu_seconds(served.process.pid) - server0
        out, _ = await flowing
        for c in clients:
            c.close()
    done = json.loads(out.decode().strip().splitlines()[-1])
    return {
        "p50_ms": pct(latencies, 0.5) * 1000,
        "p95_ms": pct(latencies, 0.95) * 1000,
        "pages": len(latencies),
        "pages_per_s": len(latencies) / wall,
        "tickets_per_s": done["n"] / done["seconds"],
        "seconds": done["seconds"],
        "server_cpu_s": server,
    }


ROWS = (
    # label, format, section, key, target, is it met (given the after value)
    (f"pipeline, {TICKETS:,} refund tickets end to end, one after another", "{:.0f} tickets/s",
     "p", "tickets_per_s", ">= 100", lambda v: v >= 100),
    ("per ticket, p50 (framework + database, wall)", "{:.1f} ms", "p", "p50_ms", "<= 10 ms",
     lambda v: v <= 10),
    ("per ticket, p95", "{:.1f} ms", "p", "p95_ms", "", None),
    ("per ticket, CPU time of the process, p50", "{:.1f} ms", "p", "cpu_p50_ms", "", None),
    ("statements per ticket (BEGIN not counted)", "{:.0f}", "p", "statements", "", None),
    ("transactions begun per ticket", "{:.0f}", "p", "transactions", "", None),
    ("plain: CPU per ticket, mean (the ratio's base)", "{:.1f} ms", "p", "cpu_mean_ms", "", None),
    (f"**durable** (`tether serve`'s default: SQLite, the queue in the process), {TICKETS:,} "
     "refund tickets in batches, end to end", "{:.0f} tickets/s", "p", "durable_per_s", ">= 50",
     lambda v: v >= 50),
    ("durable: CPU per ticket (the whole process over a batch)", "{:.1f} ms", "p",
     "durable_cpu_ms", "", None),
    ("durable CPU / plain CPU, per ticket", "{:.1f}x", "p", "durable_ratio", "<= 2x",
     lambda v: v <= 2),
    ("durable: logged operations per refund ticket (its two workflows)", "{:.0f}", "p",
     "durable_steps", "", None),
    ("durable: statements per ticket on the durable log", "{:.0f}", "p",
     "durable_log_statements", "", None),
    ("durable: statements per ticket on the desk's database", "{:.0f}", "p",
     "durable_desk_statements", "", None),
    (f"inbox page, {INBOX_TICKETS:,} tickets, {CLIENTS} clients back to back, p50", "{:.1f} ms",
     "i", "p50_ms", "", None),
    ("the same, p95", "{:.1f} ms", "i", "p95_ms", "<= 100 ms", lambda v: v <= 100),
    ("inbox pages per second", "{:.0f}", "i", "pages_per_s", "", None),
    ("server CPU per page", "{:.2f} ms", "i", "server_cpu_ms", "", None),
    ("clients' CPU per page", "{:.2f} ms", "i", "client_cpu_ms", "", None),
    (f"search (tickets and their messages), {INBOX_TICKETS:,} tickets, {CLIENTS} clients back "
     "to back, p50", "{:.1f} ms", "i", "search_p50_ms", "", None),
    ("the same, p95", "{:.1f} ms", "i", "search_p95_ms", "<= 100 ms", lambda v: v <= 100),
    ("server CPU per search", "{:.2f} ms", "i", "search_cpu_ms", "", None),
)  # fmt: skip
WORKER_ROWS = (
    ("the same with `tether serve --workers 2`, p50", "{:.1f} ms", "p50_ms", "", None),
    ("the same, p95", "{:.1f} ms", "p95_ms", "<= 100 ms", lambda v: v <= 100),
    ("pages per second", "{:.0f}", "pages_per_s", "", None),
    ("server CPU per page (both processes)", "{:.2f} ms", "server_cpu_ms", "", None),
)
FLOW_ROWS = (
    (f"inbox page while {FLOW:,} tickets run durably through `tether serve`, p50", "{:.1f} ms",
     "p50_ms", "", None),
    ("the same, p95", "{:.1f} ms", "p95_ms", "<= 100 ms", lambda v: v <= 100),
    ("tickets through the durable queue meanwhile (opened to draft)", "{:.0f} tickets/s",
     "tickets_per_s", "", None),
    ("pages served meanwhile", "{:.0f}", "pages", "", None),
)  # fmt: skip
SHARES = ("tether", "desk", "SQLAlchemy", "SQLite driver", "pydantic", "worker threads", "other")
DURABLE_SHARES = ("DBOS", "SQLAlchemy", "SQLite driver", "desk", "tether", "asyncio", "threads",
                  "json", "other")  # fmt: skip


def table(
    p: dict[str, dict[str, Any]],
    i: dict[str, dict[str, Any]],
    f: dict[str, Any],
    before: str | None,
) -> str:
    """The results (and the before column), then where the pipeline's time goes."""
    sides = ["before", "after"] if before else ["after"]
    sections = {"p": p, "i": i}
    lines = [
        f"| measure | before ({before}) | after | target | |" if before else
        "| measure | result | target | |",
        "|---|" + "---|" * (len(sides) + 2),
    ]  # fmt: skip
    for label, fmt, section, key, target, ok in ROWS:
        data = sections[section]
        cells = " | ".join(
            fmt.format(data[s][key]) if key in data[s] else "(no search)" for s in sides
        )
        verdict = "" if ok is None else "met" if ok(data["after"][key]) else "**missed**"
        lines.append(f"| {label} | {cells} | {target} | {verdict} |")
    for label, fmt, key, target, ok in WORKER_ROWS:
        none = ["(no such option)"] * (len(sides) - 1)
        cells = " | ".join([*none, fmt.format(i["workers"][key])])
        verdict = "" if ok is None else "met" if ok(i["workers"][key]) else "**missed**"
        lines.append(f"| {label} | {cells} | {target} | {verdict} |")
    for label, fmt, key, target, ok in FLOW_ROWS:
        none = ["(not measured)"] * (len(sides) - 1)
        cells = " | ".join([*none, fmt.format(f[key])])
        verdict = "" if ok is None else "met" if ok(f[key]) else "**missed**"
        lines.append(f"| {label} | {cells} | {target} | {verdict} |")
    lines += ["", "| where the plain pipeline's time goes | " + " | ".join(sides) + " |"]
    lines.append("|---|" + "---|" * len(sides))
    for k in SHARES:
        cells = " | ".join(f"{p[s]['shares'].get(k, 0.0):.0%}" for s in sides)
        lines.append(f"| {k} | {cells} |")
    lines += ["", "| where the durable pipeline's CPU goes | " + " | ".join(sides) + " |"]
    lines.append("|---|" + "---|" * len(sides))
    for k in DURABLE_SHARES:
        cells = " | ".join(f"{p[s]['durable_shares'].get(k, 0.0):.0%}" for s in sides)
        lines.append(f"| {k} | {cells} |")
    return "\n".join(lines)


def plain_report(against: str | None, tickets: int) -> None:
    """The plain pipeline alone, this tree (and ``against``'s desk), printed."""
    with tempfile.TemporaryDirectory(prefix="desk-bench-") as tmp:
        sides: dict[str, Path | None] = {}
        if against:
            sides["before"] = export(against, Path(tmp))
        sides["after"] = None
        load0 = os.getloadavg()[0]
        p, _ = pipeline(sides, tickets=tickets, plain_only=True)
        load1 = os.getloadavg()[0]
    names = list(sides)
    print(f"\nload average {load0:.1f} to {load1:.1f}; {tickets:,} tickets per side")
    print("| measure | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for label, fmt, section, key, _target, _ok in ROWS:
        if section == "p" and key in p["after"]:
            label = label.replace(f"{TICKETS:,}", f"{tickets:,}")
            print(f"| {label} | " + " | ".join(fmt.format(p[n][key]) for n in names) + " |")
    for k in SHARES:
        print(
            f"| share: {k} | "
            + " | ".join(f"{p[n]['shares'].get(k, 0.0):.0%}" for n in names)
            + " |"
        )


INBOX_ROWS = (
    ("inbox page, p50", "{:.1f} ms", "p50_ms", "", None),
    ("inbox page, p95", "{:.1f} ms", "p95_ms", "<= 100 ms", lambda v: v <= 100),
    ("inbox pages per second", "{:.0f}", "pages_per_s", "", None),
    ("server CPU per inbox page", "{:.2f} ms", "server_cpu_ms", "", None),
    ("search, p50", "{:.1f} ms", "search_p50_ms", "", None),
    ("search, p95", "{:.1f} ms", "search_p95_ms", "<= 100 ms", lambda v: v <= 100),
    ("server CPU per search", "{:.2f} ms", "search_cpu_ms", "", None),
)


def only(part: str, against: str | None, flow: int = FLOW) -> None:
    """``--only``: the inbox and search (written to the section ``desk-inbox``), or the
    inbox while ``flow`` tickets run durably (printed)."""
    started, load0 = time.perf_counter(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="desk-bench-") as tmp:
        sides: dict[str, Path | None] = {}
        if against:
            sides["before"] = export(against, Path(tmp))
        sides["after"] = None
        if part == "flow":
            print(json.dumps(asyncio.run(inbox_flowing(Path(tmp), flow)), indent=1))
        else:
            i, rounds_seen = inbox(Path(tmp), sides)
            print(json.dumps(i, indent=1))
    load1, seconds = os.getloadavg()[0], time.perf_counter() - started
    print(f"load average {load0:.1f} at the start, {load1:.1f} at the end; {seconds:.0f} s")
    if part == "flow":
        return
    names = [*sides, "workers"]
    heads = {"before": f"before ({against})", "after": "after", "workers": "after, `--workers 2`"}
    lines = [
        "| measure | " + " | ".join(heads[n] for n in names) + " | target | |",
        "|---|" + "---|" * (len(names) + 2),
    ]
    for label, fmt, key, target, ok in INBOX_ROWS:
        cells = " | ".join(fmt.format(i[n][key]) if key in i[n] else "(no search)" for n in names)
        verdict = "" if ok is None else "met" if ok(i["after"][key]) else "**missed**"
        lines.append(f"| {label} | {cells} | {target} | {verdict} |")
    rounds = "; ".join(
        f"{' / '.join(f'{p95[k]:.0f}' for k in names)} ms at {load:.1f}"
        for load, p95 in rounds_seen
    )
    command = "uv run python bench/desk.py --only inbox" + (
        f" --against {against}" if against else ""
    )
    write_section(
        "desk-inbox",
        f"""## The inbox and search alone (`bench/desk.py --only inbox`)

{machine()}, load average {load0:.1f} to {load1:.1f} (the cores were shared with other
work: wall-clock latencies move with it, the server's CPU per request much less);
`{command}`, {seconds:.0f} s. `tether serve` (durable, its default) on {INBOX_TICKETS:,}
tickets with threads (every third ticket has a customer reply and a staff note);
{CLIENTS} clients on their own keep-alive connections ask {REQUESTS_PER_CLIENT} inbox
pages each back to back, then {REQUESTS_PER_CLIENT} searches each (a word in every
ticket, one in ten, a reference in one, two words, a prefix, query syntax),
{INBOX_ROUNDS} rounds, the sides interleaved round by round. With 50 requests in flight
a request waits behind the others: its latency is about 50 x the server's time per
request, so the p95 target needs about 1.5 ms of server CPU per request and a core left
to the server.

{chr(10).join(lines)}

Inbox p95 per round ({", ".join(names)}) and the load average at its start: {rounds}.
""",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", metavar="REV", help="compare with this revision's desk")
    parser.add_argument(
        "--only",
        choices=("plain", "inbox", "flow"),
        help="plain: only the plain pipeline (timed batches, counts, profile); inbox: only "
        "the inbox and search (part 2's first half); flow: only the inbox while tickets flow; "
        "prints the table (inbox also writes the section desk-inbox)",
    )
    parser.add_argument(
        "--tickets",
        type=int,
        default=TICKETS,
        help=f"with --only plain: tickets per side (default {TICKETS:,})",
    )
    parser.add_argument(
        "--flow", type=int, default=FLOW, metavar="N", help="with --only flow: N tickets"
    )
    args = parser.parse_args()
    if args.only == "plain":
        plain_report(args.against, args.tickets)
        return
    if args.only:
        only(args.only, args.against, args.flow)
        return
    with tempfile.TemporaryDirectory(prefix="desk-bench-") as tmp:
        sides: dict[str, Path | None] = {}
        if args.against:
            sides["before"] = export(args.against, Path(tmp))
        sides["after"] = None
        load0 = os.getloadavg()[0]
        p, pipeline_rounds = pipeline(sides)
        i, rounds_seen = inbox(Path(tmp), sides)
        load_flow = os.getloadavg()[0]
        f = asyncio.run(inbox_flowing(Path(tmp)))
        load1 = os.getloadavg()[0]
    print(json.dumps({"pipeline": p, "inbox": i, "flow": f}, indent=1))
    command = "uv run python bench/desk.py" + (f" --against {args.against}" if args.against else "")
    compared = (
        f": the *before* column is revision {args.against}'s desk, measured in the same run, "
        "round by round with this one"
        if args.against
        else ""
    )
    rounds = "; ".join(
        f"{' / '.join(f'{p95[k]:.0f}' for k in [*sides, 'workers'])} ms at {load:.1f}"
        for load, p95 in rounds_seen
    )
    markdown = f"""## The support desk (`bench/desk.py`)

{machine()}, load average {load0:.1f} to {load1:.1f} during the run (the cores are shared with
other work: wall-clock figures move with it, CPU time much less); SQLite (WAL), the desk's
scripted model (no model time). `{command}`{compared}.

{table(p, i, f, args.against)}

A ticket's path: open, claim, triage (one model call), the refund agent (three model
calls, two tools), the approval stored with its run state, a staff decision claimed and
the run resumed (the refund in the ledger, the draft), the reply sent. Per ticket, wall
and CPU time are the median of {TICKETS:,} tickets in {ROUNDS} batches; statements,
transactions and the shares come from two more passes of 200 tickets (SQLAlchemy's
statement events and SQLite's own trace; cProfile, which inflates call-heavy code such as
SQLAlchemy's, so the shares are indicative). "tether" is the runtime (the loop, tools,
approvals, the state store), "desk" the desk's own code, "worker threads" the event loop
waiting on a thread (the refund tool, the state store's claim: their own work is not
profiled), "other" the standard library (asyncio, json...); a built-in's time goes to
its callers.

The inbox: `tether serve` (one uvicorn process, with its ticket worker) on {INBOX_TICKETS:,}
tickets; {CLIENTS} clients on their own keep-alive connections each ask {REQUESTS_PER_CLIENT}
pages back to back (page numbers spread over all 400 pages), then {REQUESTS_PER_CLIENT}
searches each (a word in every ticket, one in ten, one reference, two words, a prefix,
query syntax), {INBOX_ROUNDS} rounds, the clients in this process on the same cores.
With 50 requests always in flight a page waits behind the others: latency is about 50 x
the server's time per page, so with one server process the p95 target needs a core to
itself for about 1.1 ms of CPU per page, which other work on the shared cores does not
always leave; two worker processes (`tether serve --workers 2`) use both cores. Each
round's p95 ({", ".join(sides)}, two
workers) and the load average when it started: {rounds}.

The durable pipeline: each round opens {TICKETS // ROUNDS} refund tickets at once in a
fresh desk whose `DurableDesk` runs with `tether serve`'s default settings (queue polled
every 0.1 s, 8 tickets at a time, waits for decisions polled every 1 s on SQLite); the
console's side, in the same process, hands them to the queue, approves each refund as it
waits and sends each draft (every 50 ms). CPU per ticket is the process's CPU time over
the batch divided by its tickets: DBOS's threads, the workflows and the console's side,
polling included; the shares come from one more batch of 100 with a profiler in every
thread counting thread CPU time. Each round (plain, then durable; load average at its
start): {"; ".join(pipeline_rounds)}.

While tickets flow: `tether serve` on a fresh copy of the {INBOX_TICKETS:,}-ticket desk; a
console process opens {FLOW:,} refund tickets and approves each as it waits, while the
{CLIENTS} clients ask inbox pages back to back until every ticket has its draft (load
average {load_flow:.1f} at its start).
"""
    write_section("desk", markdown)
    print(markdown)


if __name__ == "__main__":
    main()
