"""The support desk under load, in one command: ``uv run python bench/desk.py``.

1. **Pipeline**: 1,000 refund tickets end to end on SQLite with the desk's scripted model
   (open -> triage -> refund agent -> approval stored -> staff decision -> run resumed ->
   ledger -> draft -> sent), one after another: tickets per second, p50/p95 per ticket, and
   the share of that time spent in the database driver (statements and commits).
2. **Inbox**: ``tether serve`` on a database of 10,000 tickets, the staff inbox page asked by
   50 concurrent clients (each logged in, each asking pages back to back): p50/p95.

Targets (issue 13): >= 100 tickets/s; <= 10 ms framework + database per ticket at p50;
inbox p95 <= 100 ms. The model is scripted, so the pipeline's time is the framework's and
the database's. Results go to docs/benchmarks.md (section ``desk``).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert, select

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "desk"))

from desk_server import serve

from _report import machine, write_section
from tether_desk.db import Database, sqlite_url
from tether_desk.decisions import decide
from tether_desk.models import Customer, Order, Staff, Ticket
from tether_desk.pipeline import Desk, process_ticket
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed
from tether_desk.tickets import open_ticket, send_reply

TICKETS = 1_000
INBOX_TICKETS = 10_000
CLIENTS = 50
REQUESTS_PER_CLIENT = 15
PACE_SECONDS = 1.0
"""Paced run: each client asks a page every second (the inbox page itself refreshes every
5 s), 50 pages/s offered. The saturation run asks back to back."""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def add_orders(db: Database, n: int) -> tuple[int, list[str]]:
    with db.write() as s:
        customer = s.scalar(select(Customer.id).where(Customer.email.like("marie%")))
        numbers = [f"C-{5000 + i:04d}" for i in range(n)]
        s.execute(
            insert(Order),
            [
                {
                    "number": number,
                    "customer_id": customer,
                    "status": "delivered",
                    "amount_paid_cents": 8990,
                    "currency": "EUR",
                    "shipping_address": "x",
                    "payment_method": "x",
                }
                for number in numbers
            ],
        )
    return int(customer or 0), numbers


async def pipeline(tmp: Path) -> dict[str, float]:
    db = Database(sqlite_url(tmp / "pipeline.db"))
    db.migrate()
    seed(db, tickets=False)
    customer, numbers = add_orders(db, TICKETS)
    with db.read() as s:
        staff = int(s.scalar(select(Staff.id)) or 0)
    desk = Desk(db, DeskScriptedModel())
    timer = db.time_statements()
    latencies: list[float] = []
    cpu: list[float] = []
    text = "Le colis est arrive abime, merci de me rembourser 20 EUR."
    started = time.perf_counter()
    for number in numbers:
        t0, c0 = time.perf_counter(), time.process_time()
        ticket = open_ticket(db, customer, number, "Colis abime", text)
        assert await process_ticket(desk, ticket) == "awaiting_approval"
        with db.read() as s:
            from tether_desk.models import Approval

            approval = s.scalar(select(Approval.id).where(Approval.ticket_id == ticket))
        assert await decide(desk, int(approval or 0), staff, approve=True) == "draft_ready"
        send_reply(db, ticket, staff)
        latencies.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    total = time.perf_counter() - started
    db.dispose()
    return {
        "tickets_per_s": TICKETS / total,
        "p50_ms": pct(latencies, 0.50) * 1000,
        "p95_ms": pct(latencies, 0.95) * 1000,
        "cpu_p50_ms": pct(cpu, 0.50) * 1000,
        "db_share": timer.seconds / total,
        "statements_per_ticket": timer.statements / TICKETS,
    }


def inbox_db(path: Path) -> None:
    db = Database(sqlite_url(path))
    db.migrate()
    seed(db, tickets=False)
    with db.write() as s:
        customer = s.scalar(select(Customer.id))
        order = s.scalar(select(Order.id))
        rows = [
            {
                "customer_id": customer,
                "order_id": order,
                "subject": f"Ticket {i}",
                "body": "Ou en est ma commande ?",
                "status": "answered",
                "category": "tracking",
            }
            for i in range(INBOX_TICKETS)
        ]
        s.execute(insert(Ticket), rows)
    db.dispose()


async def inbox(tmp: Path, pace: float) -> dict[str, float]:
    import httpx

    path = tmp / f"inbox-{pace}.db"
    inbox_db(path)
    latencies: list[float] = []
    with serve(str(path), model="scripted") as served:
        logged_in = asyncio.Barrier(CLIENTS)
        starts: list[float] = []

        async def client(n: int) -> None:
            async with httpx.AsyncClient(base_url=served.url, timeout=60) as c:
                page = (await c.get("/login")).text
                token = re.search(r'name="csrftoken" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
                form = {
                    "email": "camille@desk.example",
                    "password": "camille-demo",
                    "csrftoken": token,
                }
                await c.post("/login", data=form)
                await logged_in.wait()  # logins (argon2) are not what is measured
                starts.append(time.perf_counter())
                await asyncio.sleep(pace * n / CLIENTS)  # spread the clients over one period
                for i in range(REQUESTS_PER_CLIENT):
                    t0 = time.perf_counter()
                    r = await c.get(f"/staff/inbox?page={1 + (n * 7 + i) % 400}")
                    took = time.perf_counter() - t0
                    latencies.append(took)
                    assert r.status_code == 200 and "Ticket" in r.text
                    await asyncio.sleep(max(0.0, pace - took))

        await asyncio.gather(*(client(n) for n in range(CLIENTS)))
        total = time.perf_counter() - min(starts)
    return {
        "p50_ms": pct(latencies, 0.50) * 1000,
        "p95_ms": pct(latencies, 0.95) * 1000,
        "requests_per_s": len(latencies) / total,
    }


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="desk-bench-") as tmp:
        p = asyncio.run(pipeline(Path(tmp)))
        print(f"pipeline: {p}")
        i = asyncio.run(inbox(Path(tmp), PACE_SECONDS))
        print(f"inbox, paced: {i}")
        sat = asyncio.run(inbox(Path(tmp), 0.0))
        print(f"inbox, saturated: {sat}")
    load = os.getloadavg()[0]
    ok = lambda good: "met" if good else "**missed**"  # noqa: E731
    rows = [
        (
            f"pipeline, {TICKETS:,} refund tickets end to end, one after another",
            f"{p['tickets_per_s']:.0f} tickets/s",
            ">= 100",
            ok(p["tickets_per_s"] >= 100),
        ),
        (
            "per ticket, p50 (framework + database)",
            f"{p['p50_ms']:.1f} ms",
            "<= 10 ms",
            ok(p["p50_ms"] <= 10),
        ),
        ("per ticket, p95", f"{p['p95_ms']:.1f} ms", "", ""),
        ("per ticket, CPU time of the process, p50", f"{p['cpu_p50_ms']:.1f} ms", "", ""),
        (
            "share of the time in the database driver",
            f"{p['db_share']:.0%} ({p['statements_per_ticket']:.0f} statements/ticket)",
            "",
            "",
        ),
        (
            f"inbox page, {INBOX_TICKETS:,} tickets, {CLIENTS} clients, "
            "each asking a page a second, p50",
            f"{i['p50_ms']:.1f} ms",
            "",
            "",
        ),
        ("the same, p95", f"{i['p95_ms']:.1f} ms", "<= 100 ms", ok(i["p95_ms"] <= 100)),
        (
            f"inbox, {CLIENTS} clients asking back to back (saturation), p50",
            f"{sat['p50_ms']:.1f} ms",
            "",
            "",
        ),
        ("the same, p95", f"{sat['p95_ms']:.1f} ms", "<= 100 ms", ok(sat["p95_ms"] <= 100)),
        ("inbox throughput at saturation", f"{sat['requests_per_s']:.0f} pages/s", "", ""),
    ]
    lines = "\n".join(f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows)
    table = f"""## The support desk (`bench/desk.py`)

{machine()}, load average {load:.1f} during the run (other work shares the
cores: wall-clock figures scale with it, CPU time much less); SQLite (WAL), the desk's
scripted model (no model time), one process.

| measure | result | target | |
|---|---|---|---|
{lines}

A ticket's path: open, claim, triage (one model call), the refund agent (three model
calls, two tools), the approval stored with its run state, a staff decision claimed and
the run resumed (the refund in the ledger, the draft), the reply sent. The inbox clients
run in the benchmark's process on the same cores as the server (one uvicorn process).
At saturation each client asks its next page as soon as the last one arrives, so a page
waits behind the other 49: latency there is 50 x the cost of a page divided by the
cores, and the target is met only when a page costs about 2 ms of CPU, client included.

Where a ticket's time goes (cProfile of this benchmark): about a fifth in the SQLite
driver, most of the rest in SQLAlchemy building and executing about
{p["statements_per_ticket"]:.0f} statements in about 25 short transactions (each step of the
pipeline commits its own effect, so that it can become a durable step; the run state goes
to the runtime's state store), and about a tenth in tether's loop. The next steps for the
10 ms target are fewer statements per ticket (one transaction per pipeline step) and
cached statements on the hot paths.
"""
    write_section("desk", table)
    print(table)


if __name__ == "__main__":
    main()
