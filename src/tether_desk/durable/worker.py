"""A durable worker process: takes tickets from the queue until it is told to stop.

``tether worker`` runs :func:`run_worker`: DBOS launched under the worker's executor id
(which first resumes the runs this id left pending), the tickets' queue, and the desk's
background loop (new tickets handed to the queue, due approvals expired, decisions that
never reached their run sent again). ``recover`` takes over the pending runs of workers
that are gone for good.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from tether_desk.durable.runner import DurableDesk
from tether_desk.web.worker import TicketWorker


async def run_worker(
    runs: DurableDesk,
    stop: asyncio.Event,
    *,
    recover: Sequence[str] = (),
    say: Callable[[str], None] = print,
) -> None:
    """Process tickets until ``stop`` is set; runs in progress then stay pending for the
    next start under the same executor id (or for :meth:`DurableDesk.recover`)."""
    settings = runs.settings
    await runs.start()
    background = TicketWorker(runs.desk, poll_seconds=max(settings.poll_seconds, 1.0))
    try:
        if recover:
            taken = await runs.recover(list(recover))
            say(f"took over {len(taken)} pending run(s) of {', '.join(recover)}")
        background.start()
        say(f"worker {settings.executor_id}: taking tickets, {settings.concurrency} at a time")
        await stop.wait()
    finally:
        await background.stop()
        await runs.stop()
