"""A durable desk worker for the crash tests, run as a subprocess:

    python durable_worker.py DESK_URL EXECUTOR_ID

It is ``tether worker`` (the same :func:`~tether_desk.durable.worker.run_worker`) with
the desk's scripted model, a short polling interval, and a boundary hook driven by the
environment: ``DESK_CRASH`` is ``{"points": {TICKET_ID: BOUNDARY}, "marks": DIR,
"log": FILE}``. Every boundary reached is written to the log (SQLite: workflow id,
ticket, boundary, time). At its own boundary a ticket's run writes DIR/TICKET_ID and
stops there (it awaits forever) until the test SIGKILLs the worker; a marked boundary
does not stop a run again, so the restarted worker goes past it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

from dbos import DBOS

from tether_desk.db import Database
from tether_desk.durable import DurableDesk, DurableSettings
from tether_desk.durable.worker import run_worker
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel


def main() -> None:
    url, executor = sys.argv[1], sys.argv[2]
    plan = json.loads(os.environ["DESK_CRASH"])
    points = {int(k): v for k, v in plan["points"].items()}
    marks, log = Path(plan["marks"]), plan["log"]

    async def boundary(name: str, ticket_id: int) -> None:
        with sqlite3.connect(log, timeout=60, isolation_level=None) as db:
            db.execute(
                "INSERT INTO boundaries VALUES (?, ?, ?, ?)",
                (DBOS.workflow_id, ticket_id, name, time.time()),
            )
        mark = marks / str(ticket_id)
        if points.get(ticket_id) != name or mark.exists():
            return
        mark.write_text(name)
        await asyncio.Event().wait()  # stopped here until the worker is killed

    desk = Desk(Database(url), DeskScriptedModel())
    settings = DurableSettings(
        executor_id=executor, concurrency=64, poll_seconds=0.05, wait_poll_seconds=0.05
    )
    runs = DurableDesk(desk, settings, boundary=boundary)
    asyncio.run(serve(runs))


async def serve(runs: DurableDesk) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await run_worker(runs, stop, say=lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
