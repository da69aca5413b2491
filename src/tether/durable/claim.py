"""A plain queue's claim as statements compiled once, not built per call.

DBOS 3.4's queue thread claims work with ``SystemDatabase.start_queued_workflows``: in one
transaction, a SELECT of the queue's next ENQUEUED runs and an UPDATE that flips them to
PENDING, both built as SQLAlchemy statements anew on every look, on SQLite and
PostgreSQL alike. :func:`install` replaces it on a running, unsharded system database, for
a queue with no budget shared with other workers (no global or partition concurrency, no
rate limit, no partition key: what a tether worker's queue is), by the same two statements
built once per shape with bind parameters and run through DBOS's ``_execute_prepared``
(compiled once by DBOS on PostgreSQL, by :mod:`~tether.durable.prepared` on SQLite):
the same transaction and isolation, the same locks (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL), the same rows, limits and order, the same answer. Any other queue, or call,
goes DBOS's way.

The methods it reproduces are checked against the DBOS this was written for:
:func:`install` raises :class:`ConfigError`, naming the installed DBOS, if a release
changed them (``tests/durable/test_claim.py``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from tether.durable.fence import require_known, source_digest

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
)
"""The SystemDatabase methods whose behaviour the replacement reproduces."""

_EXPECTED_DIGEST = "27791efd3909de31"
"""Digest of the methods in ``_CHECKED`` in the DBOS this reproduces (3.4.0)."""

_UPDATE_KEYS = ("owner_xid", "app_version", "executor_id", "start_time_ms", "max_less_start")

MAX_PREPARED_IDS = 64
"""The most runs one claim's UPDATE names as a statement compiled once; a larger claim's
UPDATE is built per call, as DBOS builds it."""


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


def _is_plain(queue: Any, partition_key: str | None) -> bool:
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
    select, update = _builders(sys_db)

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
        if not _is_plain(queue, queue_partition_key):
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
        with sys_db._begin(None) as c:
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
            if is_latest_version is None:
                is_latest_version = sys_db._is_latest_version(app_version, c)
            limited = max_tasks != sys.maxsize
            values: dict[str, Any] = {"queue_name": queue.name, "app_version": app_version}
            if limited:
                values["max_tasks"] = int(max_tasks)
            named = bool(sys_db.app_name)
            if named:
                values["app_name"] = sys_db.app_name
            shape = f"tether.claim.select.{int(bool(is_latest_version))}{int(limited)}{int(named)}"
            rows = sys_db._execute_prepared(
                c,
                shape,
                values,
                lambda: select(bool(is_latest_version), limited, named),
                insert_columns=False,
            ).fetchall()
            dequeued_ids: list[str] = [row[0] for row in rows]
            if dequeued_ids:
                from dbos._logger import dbos_logger

                dbos_logger.debug(f"[{queue.name}] dequeueing {len(dequeued_ids)} task(s)")
            claimed: set[str] = set()
            chunk_size = 4096
            for start in range(0, len(dequeued_ids), chunk_size):
                chunk = dequeued_ids[start : start + chunk_size]
                for workflow_id in chunk:
                    sys_db._reject_shard_key(workflow_id, None)
                flipped = update(c, chunk, owner_xid, app_version, executor_id, start_time_ms)
                claimed.update(row[0] for row in flipped)
            return [id for id in dequeued_ids if id in claimed], None

    return start_queued_workflows


def _builders(sys_db: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The claim's SELECT (by shape) and its UPDATE (run on a connection), as DBOS's
    ``start_queued_workflows`` builds them for a plain queue, with bind parameters."""
    import sqlalchemy as sa
    from dbos._sys_db import _MAX_BIGINT, WorkflowStatusString

    ws = sys_db.tables.workflow_status
    enqueued, pending = WorkflowStatusString.ENQUEUED.value, WorkflowStatusString.PENDING.value

    def owned(named: bool, app_name: Any) -> Any:
        if not named:
            return sa.true()
        return sa.or_(ws.c.application_name == app_name, ws.c.application_name.is_(None))

    def select(is_latest: bool, limited: bool, named: bool) -> Any:
        version = ws.c.application_version == sa.bindparam("app_version")
        if is_latest:
            version = sa.or_(version, ws.c.application_version.is_(None))
        query = (
            sa.select(ws.c.workflow_uuid)
            .select_from(ws)
            .where(*sys_db._scoped(ws))
            .where(ws.c.queue_name == sa.bindparam("queue_name"))
            .where(ws.c.status == enqueued)
            .where(sys_db._in_flight_status_prover())
            .where(version)
            .where(owned(named, sa.bindparam("app_name")))
            .with_for_update(skip_locked=True, nowait=False)
        )
        query = query.order_by(ws.c.priority.asc(), ws.c.created_at.asc())
        if limited:
            query = query.limit(sa.bindparam("max_tasks", type_=sa.Integer))
        return query

    def build_update(ids: Any, named: bool, app_name: Any) -> Any:
        start = sa.bindparam("start_time_ms", type_=sa.BigInteger)
        room = sa.bindparam("max_less_start", type_=sa.BigInteger)
        return (
            ws.update()
            .where(ws.c.workflow_uuid.in_(ids))
            .where(ws.c.status == enqueued)
            .where(owned(named, app_name))
            .values(
                status=pending,
                owner_xid=sa.bindparam("owner_xid", type_=ws.c.owner_xid.type),
                application_version=sa.bindparam("app_version"),
                executor_id=sa.bindparam("executor_id"),
                application_name=app_name,
                started_at_epoch_ms=sys_db._now_ms_sql(),
                rate_limited=False,
                recovery_attempts=ws.c.recovery_attempts + 1,
                updated_at=sys_db._now_ms_sql(),
                workflow_deadline_epoch_ms=sa.case(
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
            )
            .returning(ws.c.workflow_uuid)
        )

    def update(
        c: Any,
        chunk: list[str],
        owner_xid: str | None,
        app_version: str,
        executor_id: str,
        start_time_ms: int,
    ) -> Any:
        named = bool(sys_db.app_name)
        values: dict[str, Any] = {  # the keys of _UPDATE_KEYS
            "owner_xid": owner_xid,
            "app_version": app_version,
            "executor_id": executor_id,
            "start_time_ms": start_time_ms,
            "max_less_start": _MAX_BIGINT - start_time_ms,
        }
        if len(chunk) > MAX_PREPARED_IDS:
            statement = build_update(chunk, named, sys_db.app_name)
            return c.execute(statement, {k: values[k] for k in _UPDATE_KEYS}).fetchall()
        keys = [f"id{i}" for i in range(len(chunk))]
        values.update(zip(keys, chunk, strict=True))
        values["app_name"] = sys_db.app_name
        ids: list[Any] = [sa.bindparam(k) for k in keys]
        return sys_db._execute_prepared(
            c,
            f"tether.claim.update.{len(chunk)}.{int(named)}",
            values,
            lambda: build_update(ids, named, sa.bindparam("app_name")),
            insert_columns=False,
        ).fetchall()

    return select, update
