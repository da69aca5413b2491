"""A workflow's result, waited for in the process that runs it, woken by its outcome.

DBOS 3.4 waits for a result by polling the log: ``get_result`` reads the workflow's row,
sleeps its polling interval, reads again (from async code, each read is a hop to a
thread and back). A caller waiting on a workflow this process runs so pays up to one
interval after the outcome is written, and a read per interval meanwhile, which takes
the CPU from the run it waits on.

:func:`install` makes ``await_workflow_result`` and its async twin on DBOS's running
system database wait for this process's outcome write instead: ``update_workflow_outcome``
wakes every waiter of that workflow once its write has landed, and the waiter reads the
result at once (on a SQLite log in its own thread: a local read costs less than a hop).
While the workflow runs here (or is claimed to, or was just inserted to start here), the
log is read again at most every :data:`LOCAL_RECHECK_SECONDS` (or the caller's interval
if longer): an outcome written by another process, a cancel, is seen that late at worst.
A workflow that does not run here is polled as the caller asked.

Two reads are spared where this process knows the answer. A wait that begins while the
workflow runs here and before its outcome landed here does not read first (there is
nothing to read yet; the outcome's write wakes it, and outcomes that landed are
remembered, :data:`MAX_LANDED` of them, so a wait begun just after one still reads).
And on a SQLite log, whose outcome write returns the row's serialization
(:mod:`~tether.durable.outcome`), the write hands its waiters the row it wrote (status,
output, error, serialization): DBOS's ``check_workflow_result`` interprets that row as it
would the one it reads, without the read.

Each read is DBOS's (``check_workflow_result``: the same row, the same interpretation),
but its statement (``_read_workflow_result_row``) is built once per system database
instead of at every read, where building it and its cache key cost more CPU than the
read of a local file.

The methods replaced are checked against the pinned DBOS's source; a release that
changed them is refused with :class:`ConfigError`, naming the installed DBOS
(``tests/durable/test_results.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from tether.durable import dispatch, outcome, steplog
from tether.durable.fence import one_statement, require_known, source_digest
from tether.durable.loops import runs_here

LOCAL_RECHECK_SECONDS = 1.0
"""How often a wait on a workflow running in this process reads the log anyway."""

_EXPECTED_DIGEST = "f4d04d5b91eecf7c"
"""Digest of ``await_workflow_result``, its async twin, ``check_workflow_result`` and
``update_workflow_outcome`` in DBOS 3.4.0."""

_READ_DIGEST = "936428858f68e4e1"
"""Digest of ``_read_workflow_result_row``, ``_wf`` and ``_wf_join`` in DBOS 3.4.0 (the
read :func:`_built_once` reproduces)."""

_HOOKED = "_tether_results"

MAX_LANDED = 4096
"""How many outcomes that landed in this process are remembered (the oldest go first)."""

Row = tuple[Any, ...]
"""A workflow's result row as DBOS reads it: status, output, error, serialization."""

_lock = threading.Lock()
_waiters: dict[str, list[Callable[[Row | None], None]]] = {}
"""Per workflow id, what wakes each of its waiters (with the row written, if known)."""
_landed: dict[str, None] = {}
"""Workflows whose outcome landed in this process, most recent last."""
_given = threading.local()
"""``rows``: a row to answer the next read of a workflow's result in this thread with."""


def _source_digest() -> str:
    from dbos._sys_db import SystemDatabase

    return source_digest(
        SystemDatabase.await_workflow_result,
        SystemDatabase.await_workflow_result_async,
        SystemDatabase.check_workflow_result,
        SystemDatabase.update_workflow_outcome,
    )


def _read_digest() -> str:
    from dbos._sys_db import SystemDatabase

    return source_digest(
        SystemDatabase._read_workflow_result_row, SystemDatabase._wf, SystemDatabase._wf_join
    )


def _built_once(sys_db: Any) -> Callable[[str], Any]:
    """``sys_db._read_workflow_result_row`` with its statement built once: the status,
    the output and error (the output table's, else the status row's) and the
    serialization of one workflow, read under DBOS's polling limiter; one statement, so
    on PostgreSQL in autocommit (no ``BEGIN`` and ``COMMIT`` round trips around it), on
    SQLite as DBOS reads it (:func:`~tether.durable.fence.one_statement`)."""
    import sqlalchemy as sa

    ws, wo = sys_db.tables.workflow_status, sys_db.tables.workflow_output
    statement = (
        sa.select(
            ws.c.status,
            sa.func.coalesce(wo.c.output, ws.c.output),
            sa.func.coalesce(wo.c.error, ws.c.error),
            ws.c.serialization,
        )
        .select_from(ws.outerjoin(wo, ws.c.workflow_uuid == wo.c.workflow_uuid))
        .where(ws.c.workflow_uuid == sa.bindparam("tether_wf_id"))
    )

    connect = one_statement(sys_db)

    def _read_workflow_result_row(workflow_id: str) -> Any:
        given: dict[str, Row] | None = getattr(_given, "rows", None)
        if given and workflow_id in given:  # the row its outcome's write wrote
            return given.pop(workflow_id)
        sys_db._reject_shard_key(workflow_id, None)  # as DBOS's ``_wf``
        with sys_db.poll_limiter, connect() as c:
            return c.execute(statement, {"tether_wf_id": workflow_id}).fetchone()

    return _read_workflow_result_row


def install(sys_db: Any, active: Any) -> None:
    """Let waits on ``sys_db`` (DBOS's running system database) for a workflow of this
    process be woken by its outcome; ``active``: DBOS's registry of the runs in
    progress here."""
    require_known(_source_digest(), _EXPECTED_DIGEST, "its wait for a workflow's result")
    if getattr(sys_db, _HOOKED, False):
        return
    with _lock:  # what landed on an earlier launch's log is not this one's
        _landed.clear()
    setattr(sys_db, _HOOKED, True)
    if not sys_db.sharded:  # a sharded log's rows are found by their shard key too
        require_known(_read_digest(), _READ_DIGEST, "its read of a workflow's result")
        sys_db._read_workflow_result_row = _built_once(sys_db)
    write, check = sys_db.update_workflow_outcome, sys_db.check_workflow_result
    inline = sys_db.engine.dialect.name == "sqlite"

    def update_workflow_outcome(workflow_id: str, status: str, *args: Any, **kwargs: Any) -> bool:
        landed: bool = write(workflow_id, status, *args, **kwargs)
        if landed:
            known, serialization = outcome.landed_serialization(workflow_id)
            row = (status, kwargs.get("output"), kwargs.get("error"), serialization)
            wake(workflow_id, row if known else None)
        return landed

    def here(workflow_id: str) -> bool:
        return (
            workflow_id in active.activeList()
            or dispatch.is_claimed(workflow_id)
            or steplog.starting(workflow_id)
        )

    def interval(workflow_id: str, polling: float) -> float:
        return max(polling, LOCAL_RECHECK_SECONDS) if here(workflow_id) else polling

    def waiting(workflow_id: str, waiter: Callable[[Row | None], None]) -> bool:
        """Add ``waiter``; whether the log has nothing to read yet (the workflow runs
        here and its outcome has not landed here: its write will wake the waiter)."""
        with _lock:
            _waiters.setdefault(workflow_id, []).append(waiter)
            return workflow_id not in _landed and here(workflow_id)

    def answer(workflow_id: str, row: Row, fail_if_missing: bool) -> Any:
        """DBOS's interpretation of ``row``, the one the outcome's write wrote."""
        _given.rows = {workflow_id: row}
        try:
            return check(workflow_id, fail_if_missing=fail_if_missing)
        finally:
            _given.rows = None

    def await_workflow_result(
        workflow_id: str, polling_interval: float, *, fail_if_missing: bool = False
    ) -> Any:
        unread = True
        while True:
            woken = _Woken()
            try:
                if not (waiting(workflow_id, woken.wake) and unread):
                    result = check(workflow_id, fail_if_missing=fail_if_missing)
                    if not _no_result(result):
                        return result
                unread = False
                woken.wait(interval(workflow_id, polling_interval))
                if woken.row is not None:
                    return answer(workflow_id, woken.row, fail_if_missing)
            finally:
                _discard(workflow_id, woken.wake)

    async def await_workflow_result_async(
        workflow_id: str, polling_interval: float, *, fail_if_missing: bool = False
    ) -> Any:
        loop = asyncio.get_running_loop()
        unread = True
        while True:
            woken: asyncio.Future[Row | None] = loop.create_future()
            wake_here = partial(_wake_on, loop, woken)
            try:
                if not (waiting(workflow_id, wake_here) and unread):
                    if inline:  # one read of a local file: a thread hop would cost more
                        result = check(workflow_id, fail_if_missing=fail_if_missing)
                    else:
                        result = await asyncio.to_thread(
                            check, workflow_id, fail_if_missing=fail_if_missing
                        )
                    if not _no_result(result):
                        return result
                unread = False
                # the outcome's wake or the recheck's timer settles the one future
                timer = loop.call_later(
                    interval(workflow_id, polling_interval), _settle, woken, None
                )
                try:
                    row = await woken
                finally:
                    timer.cancel()
                if row is not None:
                    return answer(workflow_id, row, fail_if_missing)
            finally:
                _discard(workflow_id, wake_here)

    sys_db.update_workflow_outcome = update_workflow_outcome
    sys_db.await_workflow_result = await_workflow_result
    sys_db.await_workflow_result_async = await_workflow_result_async


class _Woken(threading.Event):
    """A thread's wait for a workflow's outcome, with the row written if it is known."""

    def __init__(self) -> None:
        super().__init__()
        self.row: Row | None = None

    def wake(self, row: Row | None) -> None:
        self.row = row
        self.set()


def wake(workflow_id: str, row: Row | None = None) -> None:
    """Wake every waiter of ``workflow_id`` in this process (its outcome is written:
    ``row``, if known, is what was written)."""
    with _lock:
        woken = _waiters.pop(workflow_id, ())
        _landed.pop(workflow_id, None)
        while len(_landed) >= MAX_LANDED:
            del _landed[next(iter(_landed))]
        _landed[workflow_id] = None
    for w in woken:
        w(row)


def _discard(workflow_id: str, waiter: Callable[[Row | None], None]) -> None:
    with _lock:
        waiting = _waiters.get(workflow_id)
        if waiting is not None and waiter in waiting:
            waiting.remove(waiter)
            if not waiting:
                del _waiters[workflow_id]


def _wake_on(
    loop: asyncio.AbstractEventLoop, woken: asyncio.Future[Row | None], row: Row | None
) -> None:
    if runs_here(loop):  # the writer runs on the waiter's loop: no wake-up of it through its pipe
        loop.call_soon(_settle, woken, row)
        return
    with contextlib.suppress(RuntimeError):  # the waiter's loop is closed: nobody waits
        loop.call_soon_threadsafe(_settle, woken, row)


def _settle(woken: asyncio.Future[Row | None], row: Row | None) -> None:
    if not woken.done():
        woken.set_result(row)


def _no_result(result: Any) -> bool:
    from dbos._outcome import NoResult

    return isinstance(result, NoResult)
