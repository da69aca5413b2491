"""Stopping the console leaves its event loop able to use threads: the durable queue
(DBOS) lends the loop its thread pool and shuts it at stop, which made every later
``asyncio.to_thread`` fail with "cannot schedule new futures after shutdown"."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from tether.outcomes import Decision
from tether_desk.pipeline import Desk
from tether_desk.web.app import create_app


class PoolLendingRuns:
    """A queue that does what DBOS does with the loop's default executor."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(thread_name_prefix="queue")

    async def start(self) -> None:
        asyncio.get_running_loop().set_default_executor(self.pool)

    async def stop(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def submit_new(self) -> int:
        return 0

    async def deliver(
        self,
        decision: Decision,
        *,
        decided_ticket: int | None = None,
        legacy_wait: bool | None = None,
    ) -> None:
        return None


async def test_threads_still_work_on_the_loop_after_the_console_stops(desk: Desk) -> None:
    desk.runs = PoolLendingRuns()
    app = create_app(desk)
    async with app.router.lifespan_context(app):
        assert await asyncio.to_thread(lambda: 1) == 1
    # what a trace stream or a finishing step does after the stop
    assert await asyncio.to_thread(lambda: 2) == 2
