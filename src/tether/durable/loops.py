"""Whether the calling thread runs a given event loop.

A wake-up or a task for a loop the caller already runs goes straight onto it
(``call_soon``, ``create_task``); only one for a loop of another thread needs the
thread-safe path, which writes to that loop's self-pipe to wake it
(:mod:`~tether.durable.results`, :mod:`~tether.durable.handoff`).
"""

from __future__ import annotations

import asyncio


def runs_here(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` is the event loop running in the calling thread."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:  # no loop runs in this thread
        return False
