"""The web process's ticket worker: processes new tickets and resumes decided runs.

New tickets are picked from the database (status ``new``), so tickets opened while the
console was down are processed at the next start; :meth:`TicketWorker.kick` wakes it at
once after a ticket is opened. Approvals past their time are expired once a minute. On a
durable desk (``Desk.runs``) new tickets go to the workers' queue instead, and decisions
to the runs that wait for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

from sqlalchemy import select

from tether_desk.decisions import expire_due, recover_decided
from tether_desk.models import Ticket
from tether_desk.pipeline import Desk, process_ticket

log = logging.getLogger("tether_desk")


class TicketWorker:
    """Processes new tickets in the background, a few at a time."""

    def __init__(
        self,
        desk: Desk,
        *,
        concurrency: int = 4,
        poll_seconds: float = 5.0,
        recover: bool = True,
    ) -> None:
        self.desk = desk
        self.recover = recover
        """Resume decided runs that never continued, when the loop starts."""
        self.concurrency = concurrency
        self.poll_seconds = poll_seconds
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._jobs: set[asyncio.Task[Any]] = set()
        self._loop_ref: asyncio.AbstractEventLoop | None = None

    def start(self, *, process: bool = True) -> None:
        """Attach to the running event loop; ``process`` starts the ticket loop."""
        self._loop_ref = asyncio.get_running_loop()
        if process:
            self._task = asyncio.create_task(self._loop(), name="desk-ticket-worker")

    def kick(self) -> None:
        """Look for new tickets now (callable from any thread)."""
        loop = self._loop_ref
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake.set)

    def spawn(self, job: Coroutine[Any, Any, Any]) -> None:
        """Run ``job`` on the worker's event loop (a resume after a decision), from any
        thread, keeping a reference until it ends."""
        loop = self._loop_ref
        if loop is None or loop.is_closed():  # no worker running (an app without lifespan)
            asyncio.run(job)
            return
        loop.call_soon_threadsafe(self._track, job)

    def _track(self, job: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(job)
        self._jobs.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._jobs.discard(task)
        self._wake.set()  # a resumed run may have started the ticket's next round
        if not task.cancelled() and task.exception() is not None:
            log.error("background job failed", exc_info=task.exception())

    async def idle(self) -> None:
        """Wait until no background job runs and no new ticket waits (tests, shutdown)."""
        while self._jobs or self._new_ids():
            self.kick()
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        """Cancel the loop and every job, and wait for them."""
        tasks = [t for t in (self._task, *self._jobs) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    def _new_ids(self) -> list[int]:
        with self.desk.db.read() as s:
            ids = s.scalars(
                select(Ticket.id).where(Ticket.status == "new").order_by(Ticket.id).limit(50)
            ).all()
        return list(ids)

    async def _loop(self) -> None:
        limit = asyncio.Semaphore(self.concurrency)
        ticks = 0

        async def one(ticket_id: int) -> None:
            async with limit:
                await process_ticket(self.desk, ticket_id)

        try:
            if self.recover:
                await recover_decided(self.desk)
        except Exception:
            log.exception("recovering decided approvals failed")
        while True:
            try:
                if self.desk.runs is not None:  # durable: the workers' queue takes them
                    await self.desk.runs.submit_new()
                elif ids := self._new_ids():
                    await asyncio.gather(*(one(i) for i in ids))
                    continue
                ticks += 1
                if ticks % max(1, int(60 / self.poll_seconds)) == 0:
                    await expire_due(self.desk)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the ticket worker failed; retrying")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.poll_seconds):
                    await self._wake.wait()
