"""The desk on durable runs: DBOS in this process, the tickets' queue, staff decisions.

A :class:`DurableDesk` becomes ``desk.runs``: the web console's ticket worker hands new
tickets to the queue (:meth:`DurableDesk.submit_new`) and a staff decision starts the
workflow that applies it (:meth:`DurableDesk.deliver`), through a
:class:`dbos.DBOSClient`, so the console needs no DBOS runtime of its own. A process that
*processes* tickets (``tether serve`` by default, every ``tether worker``) launches DBOS
with :meth:`DurableDesk.start` and takes tickets from the queue, at most
``concurrency`` at a time.

SQLite (the default): the durable log is a second file beside the desk's database
(``tether-desk.runs.db``), for one process. PostgreSQL: the log lives in the desk's own
database (DBOS keeps its tables in the ``dbos`` schema), and any number of workers share
the queue, each under its own executor id.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSClient
from sqlalchemy import bindparam, select
from sqlalchemy.engine import make_url

from tether.durable import (
    DECISIONS_TOPIC,
    DurableConfig,
    launch,
    own_executor,
    recover_async,
    shutdown_async,
)
from tether.durable.codec import decisions_to_json
from tether.durable.handoff import enqueue_now
from tether.durable.runtime import sqlite_engine, tune_client
from tether.durable.status import WorkflowLog
from tether.errors import ConfigError
from tether.outcomes import Decision
from tether_desk.durable.boundaries import Boundary
from tether_desk.durable.flow import (
    FINISH_WORKFLOW,
    TICKET_WORKFLOW,
    finish_id,
    install,
    wait_id,
    workflow_id,
)
from tether_desk.models import Approval, Ticket
from tether_desk.pipeline import Desk

APP_NAME = "tether-desk"
APP_VERSION = "1"
"""The desk's pinned application version (see docs/durable.md, "Versioning"): raise it
only with a change to the sequence of steps of a ticket's workflows, and keep a worker of
the old version running until its runs are done."""
QUEUE = "tether_desk.tickets"
SWEEP_EVERY = 12
"""Every this many calls, :meth:`DurableDesk.submit_new` hands over every new ticket again
(already queued ones are not queued twice), in case one committed out of id order."""
INLINE_TICKETS = 8
"""On a SQLite log, :meth:`DurableDesk.submit_new` queues up to this many tickets in the
caller's thread (a few short writes); more, or a sweep, go to a worker thread."""
_NEW_AFTER = (
    select(Ticket.id, Ticket.round)
    .where(Ticket.status == "new", (Ticket.id > bindparam("after")) | (Ticket.round > 0))
    .order_by(Ticket.id)
    .limit(1000)
)
_DECIDED = select(Approval.ticket_id, Approval.status).where(
    Approval.run_id == bindparam("run_id"), Approval.call_id == bindparam("call_id")
)


def system_database_url(desk_url: str) -> str:
    """Where the durable log of a desk on ``desk_url`` lives: for SQLite a file beside
    the desk's (``NAME.runs.db``), for PostgreSQL the desk's own database."""
    url = make_url(desk_url)
    if url.get_backend_name() == "postgresql":
        return url.set(drivername="postgresql").render_as_string(hide_password=False)
    if not url.database or url.database == ":memory:":
        raise ConfigError("a durable desk needs a database file or PostgreSQL, not :memory:")
    return f"sqlite:///{Path(url.database).with_suffix('.runs.db')}"


@dataclass(frozen=True, slots=True)
class DurableSettings:
    """How this process takes part in the desk's durable runs."""

    executor_id: str = "local"
    """This worker's identity: restarted under the same id, it recovers the runs it left."""
    concurrency: int = 8
    """Tickets this process runs at a time (a run waiting for staff does not count)."""
    poll_seconds: float = 0.1
    """How often the queue is polled for runs queued by other processes (stretched to a
    quarter of how long it has been empty, up to 1 s). A place freed here, a ticket or a
    decision queued from this process are taken at once, not at the next poll."""
    wait_poll_seconds: float = 1.0
    """SQLite only: how often each run waiting for a decision looks for it (PostgreSQL
    notifies at once). Every waiting run costs one query per look, and approvals can
    wait by the hundred, overnight."""
    application_version: str = APP_VERSION
    system_database_url: str | None = None
    """The durable log's database (default: :func:`system_database_url` of the desk's)."""
    log_on_loop: bool | None = None
    """:attr:`tether.durable.DurableConfig.log_on_loop`: ``tether worker`` sets it (its
    loop runs only the desk's workflows)."""

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ConfigError("the worker's concurrency must be at least 1")
        if self.poll_seconds <= 0 or self.wait_poll_seconds <= 0:
            raise ConfigError("the polling intervals must be positive")


class DurableDesk:
    """``desk.runs`` of a desk whose tickets run as DBOS workflows (see the module doc)."""

    def __init__(
        self,
        desk: Desk,
        settings: DurableSettings | None = None,
        *,
        process: bool = True,
        boundary: Boundary | None = None,
    ) -> None:
        self.desk = desk
        self.settings = settings or DurableSettings()
        self.url = self.settings.system_database_url or system_database_url(desk.db.url)
        self.process = process
        """Whether :meth:`start` launches DBOS here to run tickets (else it only connects)."""
        self.boundary = boundary
        self.inline = self.url.startswith("sqlite:")
        """Whether the console's short writes to the log run in the caller's thread (a
        SQLite log: the desk's own writes do too) instead of a worker thread."""
        self.processing = False
        self._client: DBOSClient | None = None
        self._log: WorkflowLog | None = None
        self._engine: Any = None
        self._high_water = 0
        self._calls = 0
        self._heartbeat: asyncio.Task[None] | None = None
        desk.runs = self

    def config(self) -> DurableConfig:
        """The DBOS configuration of this process."""
        s = self.settings
        return DurableConfig(
            self.url,
            application_version=s.application_version,
            executor_id=s.executor_id,
            app_name=APP_NAME,
            polling_interval_seconds=s.wait_poll_seconds,
            log_on_loop=s.log_on_loop,
        )

    async def start(self) -> None:
        """Connect to the durable log; with ``process``, also launch DBOS here and take
        tickets from the queue (recovering first the runs this executor id left pending)."""
        await asyncio.to_thread(DBOS.migrate, self.url)
        if self.url.startswith("sqlite:"):  # the log's own settings (synchronous=NORMAL)
            self._engine = sqlite_engine(self.url)
        self._client = await asyncio.to_thread(
            DBOSClient,
            system_database_url=self.url,
            system_database_engine=self._engine,
            application_name=APP_NAME,
        )
        if self.process:
            try:
                await asyncio.to_thread(self._launch)
            except BaseException:
                await self.stop()  # the client and its engine
                raise
            self.processing = True
            from tether_desk.operations.upkeep import upkeep

            self._heartbeat = asyncio.create_task(upkeep(self), name="desk-upkeep")
        tune_client(self._client)
        self._log = WorkflowLog.of_client(self._client)

    def _launch(self) -> None:
        """Launch DBOS from a thread without an event loop: the workflows then run on
        DBOS's own loop, in its own thread, not on the caller's (the console's pages), so
        a step's synchronous work never holds a page back for its whole length.

        The queue's row is in the log before DBOS launches: DBOS's queue manager starts a
        queue's thread when it finds the row, and looks for rows at launch, then once a
        second; on a new log (a first start), a queue registered only after launch left
        the tickets and decisions of the start's first second waiting for that look. A row
        already there is left as it is until ``DBOS.register_queue`` after launch."""
        install(self.desk, self.boundary)
        self.client.register_queue(
            QUEUE,
            worker_concurrency=self.settings.concurrency,
            polling_interval_sec=self.settings.poll_seconds,
            on_conflict="never_update",
        )
        launch(self.config())
        DBOS.register_queue(
            QUEUE,
            worker_concurrency=self.settings.concurrency,
            polling_interval_sec=self.settings.poll_seconds,
        )

    async def stop(self) -> None:
        """Disconnect; runs in progress stay pending and resume at the next start. The
        loop first gets its own thread pool back from DBOS, which shuts its pool."""
        if self.processing:
            own_executor()
        if self._heartbeat is not None:
            beating, self._heartbeat = self._heartbeat, None
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating
        self._log = None
        if self._client is not None:
            client, self._client = self._client, None
            await asyncio.to_thread(client.destroy)
        if self._engine is not None:
            engine, self._engine = self._engine, None
            await asyncio.to_thread(engine.dispose)
        if self.processing:
            self.processing = False
            await shutdown_async()

    @property
    def client(self) -> DBOSClient:
        if self._client is None:
            raise ConfigError("the durable desk is not started; call start() first")
        return self._client

    @property
    def log(self) -> WorkflowLog:
        """Cheap reads of the workflows' status in the durable log."""
        if self._log is None:
            raise ConfigError("the durable desk is not started; call start() first")
        return self._log

    def _options(self, name: str, workflow_id: str) -> Any:
        return {
            "queue_name": QUEUE,
            "workflow_name": name,
            "workflow_id": workflow_id,
            "app_version": self.settings.application_version,
        }

    async def submit(self, ticket_id: int, round_: int = 0) -> None:
        """Queue the ticket's workflow (once: its id is the ticket's and its round's)."""
        options = self._options(TICKET_WORKFLOW, workflow_id(ticket_id, round_))
        await self.client.enqueue_async(options, ticket_id)

    async def submit_new(self) -> int:
        """Queue every ``new`` ticket not queued yet; returns how many were handed over.

        A ticket is never queued twice: its workflow's id is the ticket's and its
        round's, and DBOS starts one workflow per id (enqueueing an id again changes
        nothing). The tickets already in the log are left out beforehand, with one read of
        their ids, so a sweep writes nothing for them."""
        self._calls += 1
        after = 0 if self._calls % SWEEP_EVERY == 1 else self._high_water
        if not (self.inline and after):  # a sweep reads every new ticket: in a thread
            return await asyncio.to_thread(self._submit_new_after, after)
        rows = self._new_after(after)  # past the last look: a ticket or two, usually
        if len(rows) > INLINE_TICKETS:
            return await asyncio.to_thread(self._submit, rows)
        return self._submit(rows)

    def _submit_new_after(self, after: int) -> int:
        return self._submit(self._new_after(after))

    def _submit(self, rows: list[tuple[int, int]]) -> int:
        """Queue the tickets of ``rows`` (id, round) that the log does not hold yet."""
        if not rows:
            return 0
        self._high_water = max(self._high_water, *(t for t, _ in rows))
        known = self.log.existing(workflow_id(t, r) for t, r in rows)
        fresh = [(t, r) for t, r in rows if workflow_id(t, r) not in known]
        for ticket_id, round_ in fresh:
            options = self._options(TICKET_WORKFLOW, workflow_id(ticket_id, round_))
            self.client.enqueue(options, ticket_id)
        return len(fresh)

    def _new_after(self, after: int) -> list[tuple[int, int]]:
        """New tickets after ``after`` and every reopened one (a later round), with
        their round."""
        with self.desk.db.read_connection() as c:
            rows = c.execute(_NEW_AFTER, {"after": after}).all()
        return [(int(t), int(r)) for t, r in rows]

    async def deliver(
        self,
        decision: Decision,
        *,
        decided_ticket: int | None = None,
        legacy_wait: bool | None = None,
    ) -> None:
        """Start the workflow that applies a decision stored in its approval row (queued,
        for whichever worker takes it, even one that starts later). Its id is derived from
        the call (:func:`~tether_desk.durable.flow.finish_id`), so delivering again starts
        nothing; a decision whose approval is still pending (forged, early) starts nothing:
        the workflow applies the decision the approval row holds. A run of the previous
        layout, waiting in ``DBOS.recv``, is sent the decision instead (sending it twice
        applies it once).

        ``decided_ticket`` and ``legacy_wait`` (see
        :meth:`~tether_desk.pipeline.TicketRuns.deliver`) spare reading again what the
        caller's claim of the decision read: then the delivery is one write to the log."""
        wait = wait_id(decision.run_id, decision.call_id)
        if legacy_wait is None:
            legacy_wait = await asyncio.to_thread(self.log.get, wait) is not None
        if legacy_wait:
            payload = decisions_to_json([decision])
            key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
            await self.client.send_async(wait, payload, DECISIONS_TOPIC, key)
            return
        ticket = decided_ticket
        if ticket is None:
            ticket = await asyncio.to_thread(self._decided_ticket, decision)
        if ticket is None:  # not decided (a forged or early message): nothing to apply
            return
        options = self._options(FINISH_WORKFLOW, finish_id(decision.run_id, decision.call_id))
        args = (options, ticket, decision.run_id, decision.call_id)
        if self.inline and self.processing:  # a place free here: it starts now
            enqueue_now(self.client, *args)
        elif self.inline:  # one short transaction on the log: a thread hop would cost more
            self.client.enqueue(*args)
        else:
            await self.client.enqueue_async(*args)

    def _decided_ticket(self, decision: Decision) -> int | None:
        """The ticket of the decision's approval once it is decided (the workflow applies
        what the row holds, never the message's content); ``None`` while it is pending."""
        with self.desk.db.read_connection() as c:
            found = c.execute(
                _DECIDED, {"run_id": decision.run_id, "call_id": decision.call_id}
            ).one_or_none()
        if found is None or found.status == "pending":
            return None
        return int(found.ticket_id)

    async def recover(self, executor_ids: list[str]) -> list[str]:
        """Take over the pending runs of workers that are gone for good (never of a
        worker still running); returns their workflow ids."""
        if not self.processing:
            raise ConfigError("only a processing worker can take over another's runs")
        return await recover_async(executor_ids)
