"""A plain queue's claim as one statement compiled once, not built per call.

DBOS 3.4's queue thread claims work with ``SystemDatabase.start_queued_workflows``: in one
transaction, a read of the application's latest version, a SELECT of the queue's next
ENQUEUED runs and an UPDATE that flips them to PENDING, all built as SQLAlchemy statements
anew on every look, on SQLite and PostgreSQL alike; the queue thread then reads the runs'
statuses. :func:`install` replaces it on a running, unsharded system database, for a
queue with no budget shared with other workers (no global or partition concurrency, no
rate limit, no partition key: what a tether worker's queue is), by one statement per
shape, built once with bind parameters and run through DBOS's ``_execute_prepared``
(compiled once by DBOS on PostgreSQL, by :mod:`~tether.durable.prepared` on SQLite):

- on PostgreSQL, in autocommit (one round trip instead of five: ``BEGIN``, the version,
  the SELECT, the UPDATE, ``COMMIT``): ``WITH picked AS (SELECT ... FOR UPDATE SKIP
  LOCKED) UPDATE ... FROM picked ... RETURNING``. READ COMMITTED, as DBOS's transaction:
  the same rows locked and skipped, the same limit and order, the same values written;
- on SQLite, ``UPDATE ... WHERE workflow_uuid IN (SELECT ... LIMIT) RETURNING`` in a
  transaction begun as DBOS begins it (the write lock held by the UPDATE from its start).

The latest version is read in the statement as a subquery where DBOS would read it. The
UPDATE returns the taken runs' statuses as the queue thread reads them next, sorted as
DBOS's SELECT sorts them (:func:`tether.durable.statuses.remember`): that read then costs
no statement. Any other queue, or call, goes DBOS's way.

The methods it reproduces are checked against the DBOS this was written for:
:func:`install` raises :class:`ConfigError`, naming the installed DBOS, if a release
changed them (``tests/durable/test_claim.py``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from tether.durable import statuses
from tether.durable.fence import one_statement, require_known, source_digest

_CHECKED = (
    "start_queued_workflows",
    "_begin",
    "_is_latest_version",
    "_wf_in",
    "_scoped",
    "_claim_gate",
    "_name_filter",
    "_in_flight_status_prover",
    "_now_ms_sql",
    "_execute_prepared",
    "_latest_application_version",
    "_global",
)
"""The SystemDatabase methods whose behaviour the replacement reproduces."""

_EXPECTED_DIGEST = "c24006e6636521f9"
"""Digest of the methods in ``_CHECKED`` in the DBOS this reproduces (3.4.0)."""


def _source_digest() -> str:
    from dbos._sys_db import SystemDatabase

    return source_digest(*(getattr(SystemDatabase, name) for name in _CHECKED))


def _verify() -> None:
    require_known(_source_digest(), _EXPECTED_DIGEST, "its queue claim")


def install(sys_db: Any) -> bool:
    """Replace the claim of DBOS's running system database ``sys_db`` if it is a plain
    SQLite or PostgreSQL one; whether it did."""
    from dbos._sys_db_postgres import PostgresSystemDatabase
    from dbos._sys_db_sqlite import SQLiteSystemDatabase

    from tether.durable import dispatch

    if type(sys_db) not in (SQLiteSystemDatabase, PostgresSystemDatabase) or sys_db.sharded:
        return False
    _verify()
    if sys_db._claim_gate("", None) or sys_db._scoped(sys_db.tables.workflow_status):
        return False  # a claim DBOS gates or scopes further stays DBOS's
    dispatch.use_claim(sys_db, _claiming(sys_db))
    return True


def is_plain(queue: Any, partition_key: str | None = None) -> bool:
    """A queue whose claim shares no budget with other workers or partitions."""
    return (
        partition_key is None
        and queue._concurrency is None
        and queue._partition_concurrency is None
        and queue._limiter is None
        and queue._partition_limiter is None
    )


def _claiming(sys_db: Any) -> Callable[..., Any]:
    from dbos._sys_db import SystemDatabase

    stock = SystemDatabase.start_queued_workflows.__get__(sys_db)
    claim_in_one = _one_statement(sys_db)

    def start_queued_workflows(
        queue: Any,
        executor_id: str,
        app_version: str,
        queue_partition_key: str | None,
        local_running_count: int = 0,
        partition_local_running_count: int = 0,
        *,
        owner_xid: str | None = None,
        is_latest_version: bool | None = None,
    ) -> tuple[list[str], str | None]:
        if not is_plain(queue, queue_partition_key):
            return stock(  # type: ignore[no-any-return]
                queue,
                executor_id,
                app_version,
                queue_partition_key,
                local_running_count,
                partition_local_running_count,
                owner_xid=owner_xid,
                is_latest_version=is_latest_version,
            )
        start_time_ms = int(time.time() * 1000)
        max_tasks = sys.maxsize
        if queue._worker_concurrency is not None:
            max_tasks = min(max_tasks, max(0, queue._worker_concurrency - local_running_count))
            if max_tasks <= 0:
                return [], "worker_concurrency"
        if queue._partition_worker_concurrency is not None:
            room = queue._partition_worker_concurrency - partition_local_running_count
            max_tasks = min(max_tasks, max(0, room))
            if max_tasks <= 0:
                return [], "partition_worker_concurrency"
        ids = claim_in_one(
            queue.name,
            max_tasks,
            owner_xid,
            app_version,
            executor_id,
            start_time_ms,
            is_latest_version,
        )
        return ids, None

    return start_queued_workflows


def _owned(ws: Any, named: bool, app_name: Any) -> Any:
    """DBOS's ``_name_filter`` for one application name (``named``) or none."""
    import sqlalchemy as sa

    if not named:
        return sa.true()
    return sa.or_(ws.c.application_name == app_name, ws.c.application_name.is_(None))


def _flipped(sys_db: Any, app_name: Any) -> dict[str, Any]:
    """The values DBOS's claim writes into a run it takes (a plain queue's), with the
    parameters ``owner_xid``, ``app_version``, ``executor_id``, ``start_time_ms`` and
    ``max_less_start``."""
    import sqlalchemy as sa
    from dbos._sys_db import _MAX_BIGINT, WorkflowStatusString

    ws = sys_db.tables.workflow_status
    start = sa.bindparam("start_time_ms", type_=sa.BigInteger)
    room = sa.bindparam("max_less_start", type_=sa.BigInteger)
    return {
        "status": WorkflowStatusString.PENDING.value,
        "owner_xid": sa.bindparam("owner_xid", type_=ws.c.owner_xid.type),
        "application_version": sa.bindparam("app_version"),
        "executor_id": sa.bindparam("executor_id"),
        "application_name": app_name,
        "started_at_epoch_ms": sys_db._now_ms_sql(),
        "rate_limited": False,
        "recovery_attempts": ws.c.recovery_attempts + 1,
        "updated_at": sys_db._now_ms_sql(),
        "workflow_deadline_epoch_ms": sa.case(
            (
                sa.and_(
                    ws.c.workflow_timeout_ms.isnot(None),
                    ws.c.workflow_deadline_epoch_ms.is_(None),
                ),
                sa.case(
                    (ws.c.workflow_timeout_ms > room, _MAX_BIGINT),
                    else_=start + ws.c.workflow_timeout_ms,
                ),
            ),
            else_=ws.c.workflow_deadline_epoch_ms,
        ),
    }


def _latest_is(sys_db: Any, named: bool) -> Any:
    """SQL for DBOS's ``_is_latest_version``: true when no version is registered or the
    newest one the application sees is ``:app_version`` (its own and unclaimed ones when
    ``named``, as ``_latest_application_version`` reads them)."""
    import sqlalchemy as sa

    av = sys_db.tables.application_versions
    if not named:
        newest = (
            sa.select(av.c.version_name)
            .where(*sys_db._global(av))
            .order_by(av.c.version_timestamp.desc())
            .limit(1)
        )
    else:
        probes = [
            sa.select(av.c.version_name, av.c.version_timestamp)
            .where(*sys_db._global(av))
            .where(owner)
            .order_by(av.c.application_name, av.c.version_timestamp.desc())
            .limit(1)
            .subquery()
            for owner in (
                av.c.application_name == sa.bindparam("app_name"),
                av.c.application_name.is_(None),
            )
        ]
        both = sa.union_all(*(sa.select(*probe.c) for probe in probes)).subquery()
        newest = sa.select(both.c.version_name).order_by(both.c.version_timestamp.desc()).limit(1)
    return sa.func.coalesce(newest.scalar_subquery() == sa.bindparam("app_version"), sa.true())


def _one_statement(sys_db: Any) -> Callable[..., list[str]]:
    """A plain queue's claim as one statement (in autocommit on PostgreSQL, in a
    transaction on SQLite): the claim
    (queue name, most runs or ``sys.maxsize``, owner, version, executor, start time in ms,
    whether the version is the latest or None to read it) answering the runs taken, in
    DBOS's order."""
    import sqlalchemy as sa
    from dbos._logger import dbos_logger
    from dbos._sys_db import _MAX_BIGINT, WorkflowStatusString

    ws = sys_db.tables.workflow_status
    enqueued = WorkflowStatusString.ENQUEUED.value
    connect = one_statement(sys_db)
    columns, status_of = statuses.returned(sys_db)

    def build(latest: str, limited: bool, named: bool) -> Any:
        version = ws.c.application_version == sa.bindparam("app_version")
        if latest != "no":
            unversioned = ws.c.application_version.is_(None)
            if latest == "read":
                unversioned = sa.and_(unversioned, _latest_is(sys_db, named))
            version = sa.or_(version, unversioned)
        app_name: Any = sa.bindparam("app_name")
        picked = (
            sa.select(ws.c.workflow_uuid)
            .where(ws.c.queue_name == sa.bindparam("queue_name"))
            .where(ws.c.status == enqueued)
            .where(sys_db._in_flight_status_prover())
            .where(version)
            .where(_owned(ws, named, app_name))
            .order_by(ws.c.priority.asc(), ws.c.created_at.asc())
        )
        if limited:
            picked = picked.limit(sa.bindparam("max_tasks", type_=sa.Integer))
        if sys_db._is_sqlite:  # no row locks: the transaction holds the write lock
            taken = ws.c.workflow_uuid.in_(picked.scalar_subquery())
        else:
            cte = picked.with_for_update(skip_locked=True, nowait=False).cte("tether_picked")
            taken = ws.c.workflow_uuid == cte.c.workflow_uuid
        return (
            ws.update()
            .where(taken)
            .where(ws.c.status == enqueued)
            .where(_owned(ws, named, app_name))
            .values(**_flipped(sys_db, app_name))
            .returning(*columns)
        )

    def claim(
        queue_name: str,
        max_tasks: int,
        owner_xid: str | None,
        app_version: str,
        executor_id: str,
        start_time_ms: int,
        is_latest_version: bool | None,
    ) -> list[str]:
        latest = "read" if is_latest_version is None else "yes" if is_latest_version else "no"
        limited = max_tasks != sys.maxsize
        named = bool(sys_db.app_name)
        values: dict[str, Any] = {
            "queue_name": queue_name,
            "owner_xid": owner_xid,
            "app_version": app_version,
            "executor_id": executor_id,
            "start_time_ms": start_time_ms,
            "max_less_start": _MAX_BIGINT - start_time_ms,
            "app_name": sys_db.app_name,
        }
        if limited:
            values["max_tasks"] = int(max_tasks)
        shape = f"tether.claim.one.{latest}{int(limited)}{int(named)}"
        with connect() as c:
            rows = sys_db._execute_prepared(
                c, shape, values, lambda: build(latest, limited, named), insert_columns=False
            ).fetchall()
        if not rows:
            return []
        dbos_logger.debug(f"[{queue_name}] dequeueing {len(rows)} task(s)")
        taken = sorted(map(status_of, rows), key=lambda s: (s["priority"], s["created_at"]))
        statuses.remember(taken)
        return [s["workflow_uuid"] for s in taken]

    return claim
