"""One side of ``bench/desk.py``, in a process of its own, on whichever desk the import
path gives (this tree, or another revision's ``src`` for the comparison). Prints JSON.

    python bench/_desk_driver.py pipeline N time|count|profile
    python bench/_desk_driver.py durable N time|count|profile
    python bench/_desk_driver.py flow PATH N
    python bench/_desk_driver.py inbox-db PATH N

Only the desk's public functions are used, so any revision since the desk landed runs it.
"""

from __future__ import annotations

import asyncio
import collections
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import event, insert, select

from tether_desk.db import Database, sqlite_url
from tether_desk.decisions import decide
from tether_desk.models import Approval, Customer, Order, Staff, Ticket
from tether_desk.pipeline import Desk, process_ticket
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed
from tether_desk.tickets import open_ticket, send_reply

TEXT = "Le colis est arrive abime, merci de me rembourser 20 EUR."
WARMUP = 20


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


async def one_ticket(desk: Desk, customer: int, number: str, staff: int) -> None:
    """A ticket end to end: opened, triaged, the agent's proposal stored, approved, the
    run resumed (refund, draft), the reply sent."""
    db = desk.db
    ticket = open_ticket(db, customer, number, "Colis abime", TEXT)
    assert await process_ticket(desk, ticket) == "awaiting_approval"
    with db.read() as s:
        approval = s.scalar(select(Approval.id).where(Approval.ticket_id == ticket))
    assert await decide(desk, int(approval or 0), staff, approve=True) == "draft_ready"
    send_reply(db, ticket, staff)


def count_statements(db: Database) -> collections.Counter[str]:
    """Statements sent through SQLAlchemy (an executemany counts once; BEGIN not counted),
    and transactions begun, as SQLite itself sees them (its trace callback), whoever sent
    the BEGIN."""
    seen: collections.Counter[str] = collections.Counter()

    def trace(sql: str) -> None:
        if sql.lstrip()[:5].upper() == "BEGIN":
            seen["transactions"] += 1

    @event.listens_for(db.engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.set_trace_callback(trace)

    @event.listens_for(db.engine, "before_cursor_execute")
    def _statement(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip()[:5].upper() != "BEGIN":
            seen["statements"] += 1

    db.engine.dispose()  # new connections, traced
    return seen


def _where(file: str, name: str) -> str | None:
    """The group of a function's own code (``None``: a built-in, charged to its callers)."""
    if file == "~":
        if "poll" in name:
            return "worker threads"  # the loop waits while a tool or the store runs in one
        return "SQLite driver" if "sqlite3" in name else None
    for part, key in (
        ("/tether_desk/", "desk"),
        ("/tether/", "tether"),
        ("sqlalchemy", "SQLAlchemy"),
        ("pydantic", "pydantic"),
    ):
        if part in file:
            return key
    return "other"


def group(stats: pstats.Stats, where: Any = None) -> dict[str, float]:
    """Profile time by where the code lives (``where(file, name)``, default
    :func:`_where`); a built-in function's time (isinstance, getattr...) goes to the
    groups of its callers, in proportion. A group named ``idle`` is left out."""
    where = where or _where
    out: collections.Counter[str] = collections.Counter()
    table = stats.stats  # type: ignore[attr-defined]
    for (file, _line, name), (_cc, _nc, tottime, _ct, callers) in table.items():
        key = where(file, name)
        if key is not None:
            out[key] += tottime
            continue
        spent = sum(c[2] for c in callers.values()) or 1.0
        for (cfile, _cline, cname), c in callers.items():
            out[where(cfile, cname) or "other"] += tottime * c[2] / spent
    out.pop("idle", None)
    total = sum(out.values()) or 1.0
    return {k: v / total for k, v in out.items()}


async def pipeline(n: int, mode: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="desk-bench-") as tmp:
        db = Database(sqlite_url(Path(tmp) / "pipeline.db"))
        db.migrate()
        seed(db, tickets=False)
        customer, numbers = add_orders(db, n + WARMUP)
        with db.read() as s:
            staff = int(s.scalar(select(Staff.id)) or 0)
        desk = Desk(db, DeskScriptedModel())
        for number in numbers[:WARMUP]:  # imports, caches and compiled statements
            await one_ticket(desk, customer, number, staff)
        numbers = numbers[WARMUP:]
        out: dict[str, Any] = {"n": n}
        if mode == "count":
            seen = count_statements(db)
            for number in numbers:
                await one_ticket(desk, customer, number, staff)
            out.update({k: v / n for k, v in seen.items()})
        elif mode == "profile":
            profile = cProfile.Profile()
            profile.enable()
            for number in numbers:
                await one_ticket(desk, customer, number, staff)
            profile.disable()
            out["shares"] = group(pstats.Stats(profile))
        else:
            wall: list[float] = []
            cpu: list[float] = []
            started = time.perf_counter()
            for number in numbers:
                t0, c0 = time.perf_counter(), time.process_time()
                await one_ticket(desk, customer, number, staff)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            out.update({"seconds": time.perf_counter() - started, "wall": wall, "cpu": cpu})
        db.dispose()
    return out


WORDS = ("colis", "vase", "carton", "livreur", "retard", "casse", "manquant", "facture")


def inbox_db(path: str, n: int) -> None:
    """``n`` answered tickets; where the desk has threads, every third one has a customer
    reply and a staff note too (the words that ``bench/desk.py``'s searches look for: every
    ticket says "commande", one in ten "chargeur", ticket i "ref<i>")."""
    db = Database(sqlite_url(path))
    db.migrate()
    seed(db, tickets=False)
    with db.write() as s:
        customer = s.scalar(select(Customer.id))
        order = s.scalar(select(Order.id))
        staff = s.scalar(select(Staff.id))
        rows = [
            {
                "customer_id": customer,
                "order_id": order,
                "subject": f"Ticket {i} {WORDS[i % 8]}",
                "body": f"Ou en est ma commande ref{i} ? {WORDS[i * 7 % 8]} {WORDS[i * 3 % 8]}."
                + (" Le chargeur manque." if i % 10 == 0 else ""),
                "status": "answered",
                "category": "tracking",
            }
            for i in range(n)
        ]
        s.execute(insert(Ticket), rows)
        try:
            from tether_desk.models import Message  # threads (not in older revisions)
        except ImportError:
            Message = None
        if Message is not None:
            ids = list(s.scalars(select(Ticket.id).order_by(Ticket.id)))[::3]
            s.execute(
                insert(Message),
                [
                    {"ticket_id": t, "kind": kind, "author_id": author, "public": public,
                     "body": body}
                    for t in ids
                    for kind, author, public, body in (
                        ("customer", customer, True, "Toujours rien, colis abime."),
                        ("note", staff, False, "Relancer le transporteur."),
                    )
                ],
            )  # fmt: skip
    db.dispose()


def main() -> None:
    command = sys.argv[1]
    if command == "pipeline":
        print(json.dumps(asyncio.run(pipeline(int(sys.argv[2]), sys.argv[3]))))
    elif command == "durable":
        from _desk_durable import durable

        n, mode = int(sys.argv[2]), sys.argv[3]
        print(json.dumps(asyncio.run(durable(n, mode, WARMUP, add_orders))))
    elif command == "flow":
        from _desk_durable import flow

        print(json.dumps(asyncio.run(flow(sys.argv[2], int(sys.argv[3]), add_orders))))
    elif command == "inbox-db":
        inbox_db(sys.argv[2], int(sys.argv[3]))
        print("{}")
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
