"""The background duties of a process that runs tickets, every few seconds: its heartbeat
(:mod:`tether_desk.operations.liveness`) and healing (:mod:`tether_desk.operations.healing`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from tether._workers import run_in_worker
from tether_desk.operations.healing import Healer
from tether_desk.operations.liveness import BEAT_SECONDS, beat, forget

log = logging.getLogger("tether_desk")
T = TypeVar("T")


async def in_daemon_thread(fn: Callable[[], T]) -> T:
    """``fn()`` in one of the runtime's daemon worker threads
    (:func:`tether._workers.run_in_worker`): a call that DBOS's client retries while the
    database is down (with no end) never holds the process back from exiting, as a pool's
    thread would (the interpreter joins those at exit)."""
    return await run_in_worker(fn)


async def upkeep(runs: Any, every: float = BEAT_SECONDS) -> None:
    """Beat and heal until cancelled, then forget this executor (``runs``: a started,
    processing :class:`~tether_desk.durable.DurableDesk`)."""
    s = runs.settings
    db = runs.desk.db
    healer: Healer | None = None
    try:
        while True:
            try:
                await asyncio.to_thread(beat, db, s.executor_id, s.application_version)
                if healer is None and runs._client is not None:
                    healer = Healer(runs._client, db, s.executor_id, s.application_version)
                if healer is not None:
                    await in_daemon_thread(healer.heal)
            except Exception as exc:  # the fault has not cleared yet: next time
                log.warning("upkeep: %s", exc)
            await asyncio.sleep(every)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(forget, db, s.executor_id)
