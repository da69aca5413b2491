"""The console's cost of one staff decision on a durable SQLite desk, alone (about 20 s a
round):

    uv run python bench/desk_decisions.py [--decisions 150] [--rounds 3] [--against REV]

A console (``tether serve --no-process``'s side: a DBOS client, no runtime) decides
refunds one after the other, with no worker running, so no other thread competes for the
CPU or the database: what ``bench/desk_console.py`` measures inside a flowing batch, with
less noise. The approvals are stored by the plain pipeline and given the context the
durable step stores (the trace's place). Per decision: the thread CPU of
``claim_decision`` and of ``resume`` (which queues the run's finish), medians, and the
process's CPU over all of them (a thread a delivery hops to included), the mean.
``--against REV`` runs the same on another revision's ``src``, round by round with this
tree's; the table gives the median of the rounds and the load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _report import interleaved

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
SKIP = 10
"""The first decisions, left out of the medians (imports, caches)."""


async def side(n: int) -> dict[str, Any]:
    """One measure in this process, on whichever desk the import path gives."""
    sys.path.insert(0, str(BENCH))
    from sqlalchemy import select, update

    from _desk_driver import TEXT, add_orders
    from tether_desk.db import Database, sqlite_url
    from tether_desk.decisions import claim_decision, resume
    from tether_desk.durable import DurableDesk, DurableSettings
    from tether_desk.models import Approval, Staff
    from tether_desk.pipeline import Desk, process_ticket
    from tether_desk.scripted import DeskScriptedModel
    from tether_desk.seed import seed
    from tether_desk.tickets import open_ticket

    with tempfile.TemporaryDirectory(prefix="desk-decisions-") as tmp:
        db = Database(sqlite_url(Path(tmp) / "desk.db"))
        db.migrate()
        seed(db, tickets=False)
        customer, numbers = add_orders(db, n + SKIP)
        desk = Desk(db, DeskScriptedModel())
        for number in numbers:
            await process_ticket(desk, open_ticket(db, customer, number, "Colis abime", TEXT))
        with db.write_connection() as c:  # the context the durable step stores
            c.execute(update(Approval).values(context={"trace_seq": 5}))
        with db.read_connection() as c:
            staff = int(c.scalar(select(Staff.id)) or 0)
            ids = list(c.scalars(select(Approval.id).where(Approval.status == "pending")))
        runs = DurableDesk(desk, DurableSettings(), process=False)
        await runs.start()
        claims: list[float] = []
        resumes: list[float] = []
        load = os.getloadavg()[0]
        try:
            for i, approval in enumerate(ids):
                if i == SKIP:
                    c0 = time.process_time()
                t0 = time.thread_time()
                claimed = claim_decision(desk, approval, staff, approve=True)
                t1 = time.thread_time()
                await resume(desk, claimed)
                claims.append(t1 - t0)
                resumes.append(time.thread_time() - t1)
            cpu = time.process_time() - c0
        finally:
            await runs.stop()
            db.dispose()
    return {
        "claim_ms": statistics.median(claims[SKIP:]) * 1000,
        "resume_ms": statistics.median(resumes[SKIP:]) * 1000,
        "process_ms": cpu / (len(ids) - SKIP) * 1000,
        "load": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decisions", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", metavar="REV", help="compare with this revision's desk")
    parser.add_argument("--side", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        print(json.dumps(asyncio.run(side(args.side))))
        return
    runs = interleaved(Path(__file__), args.against, args.rounds, "--side", args.decisions)
    heads = list(runs)
    print(
        f"| {args.decisions} decisions, median of {args.rounds} rounds | "
        + " | ".join(heads)
        + " |"
    )
    print("|---" * (len(heads) + 1) + "|")
    for label, key in (
        ("claim_decision, thread CPU (ms, median)", "claim_ms"),
        ("resume, thread CPU (ms, median)", "resume_ms"),
        ("process CPU per decision (ms, mean)", "process_ms"),
        ("load average (1 min) at the start", "load"),
    ):
        cells = [f"{statistics.median(r[key] for r in runs[h]):.2f}" for h in heads]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
