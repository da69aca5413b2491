"""Starting and stopping the DBOS runtime that durable runs execute on.

DBOS is one runtime per process. :func:`launch` starts it from a :class:`DurableConfig`
(after every :class:`~tether.durable.DurableAgent` of the process is defined, so that the
runs a previous process left pending can be recovered by name) and :func:`shutdown`
(:func:`shutdown_async` from a loop) stops it. :func:`recover` hands a dead worker's
pending runs to the live ones.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from dbos import DBOS, DBOSConfig

from tether.durable.fence import unknown_dbos
from tether.errors import ConfigError

DEFAULT_DATABASE_URL = "sqlite:///tether-durable.sqlite"


@dataclass(frozen=True, slots=True)
class DurableConfig:
    """Where durable runs keep their log, and who this process is."""

    database_url: str = DEFAULT_DATABASE_URL
    """The DBOS system database: ``sqlite:///FILE`` (one process, no server) or
    ``postgresql://USER:PASSWORD@HOST:PORT/DB`` (several workers sharing queues)."""
    application_version: str = "1"
    """Pinned, so a restarted worker recovers the runs of the previous code. DBOS
    otherwise derives it from a hash of the workflow code, and any code change strands
    pending runs. Change it only for a change that alters a run's sequence of steps,
    and keep old workers running until their runs are done (see docs/durable.md)."""
    executor_id: str = "local"
    """This worker's identity. A worker restarted with the same id recovers the runs it
    left pending; :func:`recover` lets another worker take them."""
    app_name: str = "tether"
    """The DBOS application name (workers of one application share it)."""
    polling_interval_seconds: float = 0.1
    """How often a waiting run checks for messages when the database cannot notify it
    (SQLite; a message sent in this process wakes it at once:
    :mod:`~tether.durable.messages`); PostgreSQL notifies at once."""
    log_level: str = "WARNING"
    """DBOS's own log level."""
    sqlite_synchronous: str = "NORMAL"
    """SQLite only: the log runs in WAL mode with this ``synchronous`` setting. ``NORMAL``
    survives any crash of the process (the failure durable mode is for) and commits a step
    without waiting for the disk; a power loss may then undo the last steps, which run
    again. ``FULL`` waits for the disk at every step (several times slower)."""

    log_on_loop: bool | None = None
    """Whether a workflow's step check, step record and outcome (one short statement each)
    run on the workflows' event loop instead of a worker thread (:mod:`~tether.durable.hops`).
    ``None``: yes on SQLite (a local file: shorter than the hop), no on PostgreSQL.
    ``True`` on PostgreSQL saves a thread hop a statement (about a millisecond of CPU per
    desk ticket) but the loop then waits for each round trip, and while the database is
    unreachable for DBOS's retries (up to a minute apart), with everything else on it: for
    a process whose loop runs only workflows, such as ``tether worker``."""

    def __post_init__(self) -> None:
        if not self.database_url.startswith(("sqlite:", "postgresql:", "postgresql+")):
            raise ConfigError(
                "the durable database URL must start with sqlite:/// or postgresql://"
            )
        if not self.application_version:
            raise ConfigError("DurableConfig.application_version must not be empty")
        if self.sqlite_synchronous not in ("NORMAL", "FULL", "EXTRA"):
            raise ConfigError("DurableConfig.sqlite_synchronous must be NORMAL, FULL or EXTRA")
        if self.polling_interval_seconds <= 0:
            raise ConfigError("DurableConfig.polling_interval_seconds must be positive")

    def dbos_config(self) -> DBOSConfig:
        """The configuration DBOS is started with."""
        config: DBOSConfig = {
            "name": self.app_name,
            "system_database_url": self.database_url,
            "application_version": self.application_version,
            "executor_id": self.executor_id,
            "log_level": self.log_level,
            "notification_listener_polling_interval_sec": self.polling_interval_seconds,
        }
        if self.database_url.startswith("sqlite:"):
            config["system_database_engine"] = _sqlite_engine(
                self.database_url, self.sqlite_synchronous
            )
        else:
            config["db_engine_kwargs"] = POSTGRES_ENGINE_KWARGS
        return config


POSTGRES_ENGINE_KWARGS: dict[str, Any] = {"pool_pre_ping": False}
"""Over DBOS's defaults for its PostgreSQL engine: no ``SELECT 1`` before each of its
transactions (a round trip per logged step, per poll of the queue). A connection the server
dropped fails its next statement instead; DBOS then retries the operation on a fresh
connection (its ``db_retry``), as it does for a connection lost mid-transaction."""


SQLITE_POOL_SIZE = 20
"""Connections kept open to the SQLite log. DBOS writes from the event loop's worker
threads, its queue threads and its polling thread at once; with SQLAlchemy's default
(5 kept, the rest opened and closed on each use) a busy worker reopened a connection,
and ran its pragmas again, several times per step."""


def sqlite_engine(url: str, synchronous: str = "NORMAL", pool_size: int = 2) -> Any:
    """An engine on a SQLite durable log with the settings of :class:`DurableConfig`, for a
    :class:`dbos.DBOSClient` (``system_database_engine=``; dispose of it after the
    client): DBOS's own engine for a client has SQLite's default ``synchronous=FULL``,
    which waits for the disk at each enqueue and each decision sent."""
    return _sqlite_engine(url, synchronous, pool_size)


def _sqlite_engine(url: str, synchronous: str, pool_size: int = SQLITE_POOL_SIZE) -> Any:
    """DBOS's SQLite engine (immediate transactions, a long busy timeout, foreign keys),
    in WAL mode: readers never block the writer, and a commit costs one append."""
    import sqlalchemy as sa
    from sqlalchemy import event

    engine = sa.create_engine(url, pool_size=pool_size, max_overflow=pool_size)

    @event.listens_for(engine, "connect")
    def setup(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute(f"PRAGMA synchronous={synchronous}")
        dbapi_conn.execute("PRAGMA busy_timeout=30000")
        dbapi_conn.execute("PRAGMA foreign_keys=ON")
        dbapi_conn.isolation_level = "IMMEDIATE"

    return engine


class _ShutdownCancellations(logging.Filter):
    """Drops DBOS's warning for each run cancelled by a shutdown: such a run is not lost,
    it stays pending and resumes at the next launch (said once, by the caller)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Asyncio task cancelled for workflow")


_QUIET = _ShutdownCancellations()


def launch(config: DurableConfig | None = None) -> None:
    """Start DBOS in this process; runs this worker left pending start recovering.

    Call it after defining every durable agent and from the thread whose event loop
    should run the workflows (inside ``async`` code, or from plain code, where DBOS
    starts a loop of its own). A second call without :func:`shutdown` is an error.
    """
    config = config or DurableConfig()
    if is_launched():
        raise ConfigError("DBOS is already running in this process; call shutdown() first")
    logging.getLogger("dbos").removeFilter(_QUIET)
    from tether.durable import (
        claim,
        dispatch,
        handoff,
        hops,
        listener,
        messages,
        notifier,
        outcome,
        prepared,
        queue_stop,
        queueconfig,
        results,
        starts,
        statuses,
        steplog,
        wakeup,
    )

    dispatch.install()
    notifier.install()
    listener.verify()
    queue_stop.verify()
    handoff.verify()
    DBOS(config=config.dbos_config())
    DBOS.launch()

    steplog.install(_dbos_system_database())
    outcome.install(_dbos_system_database())
    prepared.install(_dbos_system_database())
    claim.install(_dbos_system_database())
    statuses.install(_dbos_system_database())
    queueconfig.install(_dbos_system_database())
    results.install(_dbos_system_database(), _dbos_active_runs())
    messages.install(_dbos_system_database())
    sqlite = config.database_url.startswith("sqlite:")
    hops.install(inline_log=sqlite if config.log_on_loop is None else config.log_on_loop)
    starts.install(sqlite_log=sqlite)
    wakeup.install(_dbos_system_database())


def tune_client(client: Any) -> None:
    """Give a :class:`dbos.DBOSClient`'s own system database the statements compiled once
    that :func:`launch` gives the runtime's (its enqueues write the same rows), and let
    its enqueues wake this process's queue threads at once (:mod:`~tether.durable.dispatch`)
    and its messages their receivers here (:mod:`~tether.durable.messages`)."""
    from tether.durable import dispatch, messages, prepared

    prepared.install(client._sys_db)
    dispatch.watch_client(client)
    messages.watch_client(client)


def _dbos_instance() -> Any:
    """DBOS's instance in this process, or ``None`` (private: read here and nowhere else)."""
    from dbos import _dbos

    return _dbos._dbos_global_instance


def _dbos_system_database() -> Any:
    """DBOS's system database object (private, as above)."""
    try:
        return _dbos_instance()._sys_db
    except AttributeError as exc:
        raise unknown_dbos(str(exc)) from exc


def _dbos_active_runs() -> Any:
    """DBOS's registry of the runs in progress in this process (private, as above)."""
    try:
        return _dbos_instance()._active_workflows_set
    except AttributeError as exc:
        raise unknown_dbos(str(exc)) from exc


def is_launched() -> bool:
    """Whether DBOS runs in this process."""
    dbos = dbos_internals()
    return dbos is not None and dbos.launched


@dataclass(frozen=True, slots=True)
class DbosInternals:
    """What tether reads of DBOS's private state, for want of a public API in dbos 3.4."""

    launched: bool
    """Whether :meth:`DBOS.launch` ran (no public ``is_launched``)."""
    stop_events: list[threading.Event]
    """Set to stop DBOS's background threads, its queue thread among them: a stop takes no
    new run from the queue before the runs of the loop are cancelled (``DBOS.destroy``
    sets them too, but only after the runs it waits for)."""
    workflow_tasks: set[asyncio.Task[Any]]
    """The asyncio tasks of the async workflows running in this process (DBOS lists runs,
    not the tasks a loop must cancel before it stops)."""
    active_ids: list[str]
    """The workflows executing in this process now (``list_workflows`` reads the log,
    which says PENDING for a run executing here and for one a fault left behind)."""


def dbos_internals() -> DbosInternals | None:
    """DBOS's private state this process needs, read in this one place (``None`` when DBOS
    was never started or was destroyed). A DBOS release that renames any of it fails here,
    loudly (and ``tests/durable/test_dbos_internals.py`` says so), never silently."""
    instance = _dbos_instance()
    if instance is None:
        return None
    try:
        return DbosInternals(
            launched=bool(instance._launched),
            stop_events=list(instance.background_thread_stop_events),
            workflow_tasks=instance._workflow_tasks,
            active_ids=list(instance._active_workflows_set.activeList()),
        )
    except AttributeError as exc:
        raise unknown_dbos(str(exc)) from exc


def running_workflow_ids() -> set[str]:
    """The workflows executing in this process now (empty when DBOS is not running)."""
    dbos = dbos_internals()
    return set(dbos.active_ids) if dbos is not None else set()


def shutdown(wait_seconds: int = 0) -> None:
    """Stop DBOS; runs still in progress stay pending and recover on the next launch
    (DBOS's warning for each run cancelled from then on is dropped)."""
    logging.getLogger("dbos").addFilter(_QUIET)
    from tether.durable import listener, queue_stop, wakeup

    wakeup.uninstall()
    if (instance := _dbos_instance()) is not None:
        listener.release(instance)  # not joined: it ends at its next wake-up
        queue_stop.settle(instance)  # a claim in flight hands its run over first
    DBOS.destroy(workflow_completion_timeout_sec=wait_seconds)


_OWN_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ThreadPoolExecutor] = (
    weakref.WeakKeyDictionary()
)


def own_executor() -> None:
    """Give the running event loop a thread pool of its own again. DBOS lends a loop its
    pool as default executor and shuts that pool when it stops: an ``asyncio.to_thread``
    after (or while) it stops, such as a run being cancelled or the stop itself, failed
    with "cannot schedule new futures after shutdown". Called again on the same loop, it
    ends the pool it gave before (its queued work still runs)."""
    loop = asyncio.get_running_loop()
    pool = ThreadPoolExecutor(thread_name_prefix="tether-loop")
    loop.set_default_executor(pool)
    before = _OWN_POOLS.get(loop)
    _OWN_POOLS[loop] = pool
    if before is not None:
        before.shutdown(wait=False)


async def shutdown_async(wait_seconds: int = 0) -> None:
    """:func:`shutdown` from the loop DBOS was launched from, without a traceback: the
    loop gets its own thread pool back (:func:`own_executor`), no new run is taken, the
    runs of this loop get ``wait_seconds`` to finish and are then cancelled (they stay
    pending and resume at the next launch: a cancelled run is a crashed one), and only
    then DBOS stops, from a thread that is not one of its own. A run left going would
    reach its next step with DBOS gone and fail loudly."""
    own_executor()
    logging.getLogger("dbos").addFilter(_QUIET)
    dbos = dbos_internals()
    if dbos is not None:
        for stop in dbos.stop_events:
            stop.set()  # the queue takes no new run into this loop
        running = _runs_here(dbos)
        if running and wait_seconds > 0:
            await asyncio.wait(running, timeout=wait_seconds)
        await _cancel(_runs_here(dbos))
    await asyncio.to_thread(shutdown)
    if dbos is not None:
        await _cancel(_runs_here(dbos))  # one started while DBOS stopped


def _runs_here(dbos: DbosInternals) -> list[asyncio.Task[Any]]:
    """DBOS's workflow tasks on the running loop."""
    loop = asyncio.get_running_loop()
    return [t for t in list(dbos.workflow_tasks) if t.get_loop() is loop and not t.done()]


async def _cancel(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def recover(executor_ids: list[str]) -> list[str]:
    """Put the pending runs of dead workers back in their queues, for live workers to
    take (this process included); returns their workflow ids.

    Only for workers that are really gone: a worker that is still running would go on
    with runs that another worker also resumes (DBOS then stops the later of the two at
    its next step, but a step in flight may run twice; idempotency keys cover tools).
    """
    handles: list[Any] = DBOS._recover_pending_workflows(executor_ids)
    return [h.get_workflow_id() for h in handles]


async def recover_async(executor_ids: list[str]) -> list[str]:
    """:func:`recover` from async code."""
    return await asyncio.to_thread(recover, executor_ids)
