"""Search and the inbox with threads, in one command: ``uv run python bench/desk_search.py``.

``tether serve`` on a SQLite database of 10,000 tickets (16,668 messages: every third
ticket has a customer reply and a staff note); 50 clients, each logged in as staff on its
own keep-alive connection, ask back to back, in turn, a search (a word in every ticket, a
word in one in ten, a reference in one, two words) and an inbox page (which now carries
each row's waiting time and assignee). p50/p95 of each kind from the same run, so the
machine's load falls on both alike. Target: search p95 <= 100 ms, like the inbox's.
Results go to docs/benchmarks.md (section ``desk-search``).
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "desk"))

from desk_server import serve
from sqlalchemy import insert, select

from _report import machine, write_section
from desk import Client, cpu_seconds, login, pct
from tether_desk.clock import utcnow
from tether_desk.db import Database, sqlite_url
from tether_desk.models import Message, Order, Staff, Ticket
from tether_desk.seed import seed

TICKETS = 10_000
CLIENTS = 50
REQUESTS_PER_CLIENT = 40
WORDS = [
    "colis",
    "vase",
    "carton",
    "livreur",
    "retard",
    "casse",
    "manquant",
    "facture",
    "adresse",
    "notice",
]
QUERIES = ("commande", "chargeur", "ref{n}", "colis abime")
"""Every ticket says "commande"; one in ten "chargeur"; one ticket its "refN"."""


def build(path: Path) -> None:
    db = Database(sqlite_url(path))
    db.migrate()
    seed(db, tickets=False)
    rng = random.Random(7)
    with db.write() as s:
        order = s.scalar(select(Order.id).where(Order.number == "C-1042"))
        customer = s.scalar(select(Order.customer_id).where(Order.id == order))
        staff = s.scalar(select(Staff.id))
        now = utcnow()
        rows = []
        for i in range(TICKETS):
            words = " ".join(rng.choice(WORDS) for _ in range(12))
            extra = " Le chargeur manque." if i % 10 == 0 else ""
            body = f"Ma commande ref{i} : {words}.{extra}"
            when = now - timedelta(minutes=TICKETS - i)
            rows.append(
                {
                    "customer_id": customer,
                    "order_id": order,
                    "subject": f"Colis {rng.choice(WORDS)} {i}",
                    "body": body,
                    "status": "needs_human",
                    "created_at": when,
                    "updated_at": when,
                }
            )
        s.execute(insert(Ticket), rows)
        ids = list(s.scalars(select(Ticket.id).order_by(Ticket.id)))
        replies = []
        for tid in ids[::3]:
            replies.append(
                {
                    "ticket_id": tid,
                    "kind": "customer",
                    "author_id": customer,
                    "public": True,
                    "body": "Toujours rien, colis abime.",
                    "created_at": now,
                }
            )
            replies.append(
                {
                    "ticket_id": tid,
                    "kind": "note",
                    "author_id": staff,
                    "public": False,
                    "body": "Relancer le transporteur.",
                    "created_at": now,
                }
            )
        s.execute(insert(Message), replies)
    db.dispose()


async def run(path: Path) -> dict[str, Any]:
    latencies: dict[str, list[float]] = {"search": [], "inbox": []}
    with serve(str(path), model="scripted", args=("--plain",)) as served:
        port = int(served.url.rsplit(":", 1)[1])
        cookie = await login(served.url)
        clients = [Client(port, cookie) for _ in range(CLIENTS)]
        for c in clients:
            await c.open()
            await c.get("/staff/inbox")
            await c.get("/staff/search?q=colis")

        async def ask(n: int, c: Client) -> None:
            for i in range(REQUESTS_PER_CLIENT):
                if i % 2:
                    kind, path = "inbox", f"/staff/inbox?page={1 + (n * 7 + i) % 400}"
                else:
                    q = QUERIES[(n + i // 2) % len(QUERIES)].format(n=(n * 97 + i) % TICKETS)
                    kind, path = "search", f"/staff/search?q={q.replace(' ', '+')}"
                t0 = time.perf_counter()
                status, body = await c.get(path)
                latencies[kind].append(time.perf_counter() - t0)
                assert status == 200 and b"Colis" in body, (status, path)

        server0 = cpu_seconds(served.process.pid)
        t0 = time.perf_counter()
        await asyncio.gather(*(ask(n, c) for n, c in enumerate(clients)))
        wall = time.perf_counter() - t0
        server = cpu_seconds(served.process.pid) - server0
        for c in clients:
            c.close()
    n = sum(len(v) for v in latencies.values())
    return {"latencies": latencies, "per_s": n / wall, "server_cpu_ms": server / n * 1000}


def main() -> None:
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "search.db"
        t0 = time.perf_counter()
        build(path)
        print(f"built {TICKETS:,} tickets in {time.perf_counter() - t0:.1f} s")
        got = asyncio.run(run(path))
    rows = []
    for kind in ("search", "inbox"):
        values = got["latencies"][kind]
        p50, p95 = pct(values, 0.5) * 1000, pct(values, 0.95) * 1000
        verdict = "met" if p95 <= 100 else "missed"
        rows.append(f"| {kind} | {len(values)} | {p50:.1f} ms | {p95:.1f} ms | {verdict} |")
        print(f"{kind}: p50 {p50:.1f} ms, p95 {p95:.1f} ms ({len(values)} requests)")
    ratio = pct(got["latencies"]["search"], 0.95) / pct(got["latencies"]["inbox"], 0.95)
    table = "\n".join(
        [
            "## Search and the inbox with threads (`bench/desk_search.py`)",
            "",
            f"{machine()}; load average {load:.1f} at the start (the machine was shared "
            f"with other work). `tether serve --plain`, SQLite, {TICKETS:,} tickets and "
            f"{TICKETS + 2 * (TICKETS // 3 + 1):,} messages, {CLIENTS} clients asking a search "
            "and an inbox page in turn, back to back.",
            "",
            "| request | count | p50 | p95 | p95 <= 100 ms |",
            "|---|---|---|---|---|",
            *rows,
            "",
            f"Search p95 / inbox p95 in the same run: {ratio:.2f}. Requests per second: "
            f"{got['per_s']:.0f}; server CPU per request {got['server_cpu_ms']:.2f} ms.",
        ]
    )
    write_section("desk-search", table)


if __name__ == "__main__":
    main()
