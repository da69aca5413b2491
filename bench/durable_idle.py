"""What an idle durable desk costs: the CPU a second of a process running
:class:`~tether_desk.durable.DurableDesk` on SQLite (what ``tether serve`` runs by default:
DBOS, its queue thread and the desk's upkeep) while no ticket comes, in one command
(about 25 s with the defaults):

    uv run python bench/durable_idle.py [--seconds 20] [--settle 3]

It starts the desk on a fresh database, lets it settle, then reads the process's CPU time
(user + system, all threads) over ``--seconds``. Prints JSON: ``ms_per_s``, the load.
Run it from another tree's ``src`` (``PYTHONPATH=OTHER/src``) to compare revisions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from tether_desk.db import Database, sqlite_url
from tether_desk.durable import DurableDesk, DurableSettings
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed


async def idle(seconds: float, settle: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="desk-idle-") as tmp:
        db = Database(sqlite_url(Path(tmp) / "idle.db"))
        db.migrate()
        seed(db, tickets=False)
        runs = DurableDesk(Desk(db, DeskScriptedModel()), DurableSettings())
        await runs.start()
        try:
            await asyncio.sleep(settle)
            load = os.getloadavg()[0]
            c0, t0 = time.process_time(), time.perf_counter()
            await asyncio.sleep(seconds)
            cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        finally:
            await runs.stop()
            db.dispose()
    return {"ms_per_s": cpu / wall * 1000, "seconds": wall, "load": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=3.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(idle(args.seconds, args.settle))))


if __name__ == "__main__":
    main()
