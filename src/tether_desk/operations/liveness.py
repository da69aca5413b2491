"""Which executors are alive: each process that runs tickets writes a heartbeat (a row of
the desk's ``settings`` table, ``alive:ID``) every few seconds and deletes it when it
stops. A run pending on an executor without a fresh heartbeat waits for a worker that is
gone or stopped: the operator's view says so, and what unblocks it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select

from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.models import Setting

PREFIX = "alive:"
BEAT_SECONDS = 5.0
STALE_AFTER = timedelta(seconds=30)
"""An executor silent this long is taken as gone."""


@dataclass(frozen=True, slots=True)
class Executor:
    """One executor's last heartbeat."""

    executor_id: str
    at: datetime
    version: str
    pid: int

    def alive(self, now: datetime | None = None) -> bool:
        return (now or utcnow()) - self.at < STALE_AFTER


def beat(db: Database, executor_id: str, version: str) -> None:
    """Record that ``executor_id`` (of application ``version``) is alive now."""
    value = json.dumps({"at": utcnow().isoformat(), "version": version, "pid": os.getpid()})
    with db.write() as s:
        row = s.get(Setting, PREFIX + executor_id)
        if row is None:
            s.add(Setting(key=PREFIX + executor_id, value=value))
        else:
            row.value = value


def forget(db: Database, executor_id: str) -> None:
    """``executor_id`` stopped."""
    with db.write() as s:
        s.execute(delete(Setting).where(Setting.key == PREFIX + executor_id))


def executors(db: Database) -> dict[str, Executor]:
    """Every executor's last heartbeat, by id."""
    with db.read() as s:
        rows = s.execute(select(Setting.key, Setting.value).where(Setting.key.like(PREFIX + "%")))
        found = {}
        for key, value in rows:
            data = json.loads(value)
            eid = key[len(PREFIX) :]
            at = datetime.fromisoformat(data["at"])
            found[eid] = Executor(eid, at, str(data["version"]), int(data["pid"]))
    return found


async def heartbeat(db: Database, executor_id: str, version: str) -> None:
    """Beat until cancelled, then forget the executor (a failed beat is tried again)."""
    try:
        while True:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(beat, db, executor_id, version)
            await asyncio.sleep(BEAT_SECONDS)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(forget, db, executor_id)
