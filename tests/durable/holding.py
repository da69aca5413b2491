"""The queue tests' workflow: it holds one of its queue's places for a while, and counts
how many held one at once."""

from __future__ import annotations

import asyncio

from dbos import DBOS

LONG_POLL = 60.0
"""A queue's polling interval longer than any of these tests may take."""

HOLD = "tests.hold"
"""The workflow's registered name (for a client's enqueue)."""

running: set[str] = set()
most: list[int] = [0]


def reset() -> None:
    """Forget the runs counted so far."""
    running.clear()
    most[0] = 0


@DBOS.workflow(name=HOLD)
async def hold(key: str, seconds: float) -> str:
    running.add(key)
    most[0] = max(most[0], len(running))
    await asyncio.sleep(seconds)
    running.discard(key)
    return key
