"""The background duties of a process that runs tickets, every few seconds: its heartbeat
(:mod:`tether_desk.operations.liveness`) and healing (:mod:`tether_desk.operations.healing`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from tether_desk.operations.healing import Healer
from tether_desk.operations.liveness import BEAT_SECONDS, beat, forget

log = logging.getLogger("tether_desk")


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
                    await asyncio.to_thread(healer.heal)
            except Exception as exc:  # the fault has not cleared yet: next time
                log.warning("upkeep: %s", exc)
            await asyncio.sleep(every)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.to_thread(forget, db, s.executor_id)
