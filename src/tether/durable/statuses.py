"""The statuses of the runs a claim took, read by a statement built once, not per call.

After every claim, DBOS 3.4's queue thread reads the claimed runs' statuses with
``SystemDatabase.get_workflow_statuses``: a SELECT of some thirty columns joined to the
runs' inputs, built as a SQLAlchemy statement anew on every call (its construction is
most of the call's CPU). :func:`install` replaces it on a running, unsharded SQLite or
PostgreSQL system database by the same statement built once per number of runs asked
(up to :data:`MAX_PREPARED_IDS`, one bind parameter each) and executed as SQLAlchemy
executes DBOS's (the same columns, types and result processing), in the same
transaction per call with DBOS's own retry on a lost connection, answering the same
statuses in the order asked. A longer list goes DBOS's way.

The read right after a claim reads nothing: :mod:`~tether.durable.claim`'s UPDATE returns
the columns of this read for the runs it took (the row as the claim left it, committed,
which DBOS's read reads back), and the next read in that thread, if it asks for exactly
those runs at once (within :data:`RECALL_SECONDS`), is answered with them
(:func:`remember`); any other read goes to the database.

The method's source and those it relies on are checked against the DBOS this was written
for: :func:`install` raises :class:`ConfigError`, naming the installed DBOS, if a release
changed them (``tests/durable/test_statuses.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from tether.durable.fence import one_statement, require_known, source_digest

_CHECKED = ("get_workflow_statuses", "_key_column", "_wf_in", "_wf_join")
"""The SystemDatabase methods whose behaviour the replacement reproduces."""

_EXPECTED_DIGEST = "35d5deeb2505aade"
"""Digest of the methods in ``_CHECKED`` (and of ``db_retry``) in DBOS 3.4.0."""

MAX_PREPARED_IDS = 64
"""The most runs one read names with a statement built once."""


def _source_digest() -> str:
    from dbos._sys_db import SystemDatabase, db_retry

    return source_digest(*(getattr(SystemDatabase, name) for name in _CHECKED), db_retry)


def _verify() -> None:
    require_known(_source_digest(), _EXPECTED_DIGEST, "its workflow status read")


def install(sys_db: Any) -> bool:
    """Replace the status read of DBOS's running system database ``sys_db`` if it is a
    plain, unsharded SQLite or PostgreSQL one; whether it did."""
    from dbos._sys_db_postgres import PostgresSystemDatabase
    from dbos._sys_db_sqlite import SQLiteSystemDatabase

    if type(sys_db) not in (SQLiteSystemDatabase, PostgresSystemDatabase) or sys_db.sharded:
        return False
    _verify()
    if sys_db._key_column(sys_db.tables.workflow_status) is not None:
        return False  # a keyed database reads a shard key too: DBOS's way
    setattr(sys_db, "get_workflow_statuses", _reading(sys_db))  # noqa: B010
    return True


_COLUMNS = (
    "workflow_uuid",
    "status",
    "name",
    "recovery_attempts",
    "config_name",
    "class_name",
    "authenticated_user",
    "authenticated_roles",
    "assumed_role",
    "queue_name",
    "executor_id",
    "created_at",
    "updated_at",
    "application_version",
    "application_id",
    "workflow_deadline_epoch_ms",
    "workflow_timeout_ms",
    "deduplication_id",
    "priority",
    "inputs",
    "queue_partition_key",
    "forked_from",
    "parent_workflow_id",
    "started_at_epoch_ms",
    "serialization",
    "delay_until_epoch_ms",
    "attributes",
    "schedule_name",
    "debounce_deadline_epoch_ms",
    "is_debounced",
    "application_name",
)
"""The columns DBOS's status read selects, in its order."""


def _columns(sys_db: Any, inputs: Any) -> list[Any]:
    ws = sys_db.tables.workflow_status
    return [inputs.label("inputs") if name == "inputs" else ws.c[name] for name in _COLUMNS]


def _statement(sys_db: Any, count: int) -> Any:
    """DBOS's SELECT of ``count`` runs' statuses, the ids as parameters ``id0``..."""
    import sqlalchemy as sa

    ws, wi = sys_db.tables.workflow_status, sys_db.tables.workflow_input
    return (
        sa.select(*_columns(sys_db, sa.func.coalesce(wi.c.inputs, ws.c.inputs)))
        .select_from(ws.outerjoin(wi, sys_db._wf_join(ws, wi)))
        .where(ws.c.workflow_uuid.in_([sa.bindparam(f"id{i}") for i in range(count)]))
    )


def returned(sys_db: Any) -> tuple[list[Any], Callable[[Any], dict[str, Any]]]:
    """The columns of DBOS's status read for an UPDATE's ``RETURNING`` on the status
    table (the inputs by a subquery), and how to make a status of one row the driver
    returned for them (each value through its type's result processor, as SQLAlchemy
    would)."""
    import sqlalchemy as sa

    ws, wi = sys_db.tables.workflow_status, sys_db.tables.workflow_input
    inner = wi.alias("tether_input")
    # SQLite's RETURNING names the updated table's columns unqualified: named here by hand
    outer = (
        sa.literal_column(f"{ws.name}.workflow_uuid") if sys_db._is_sqlite else ws.c.workflow_uuid
    )
    given = sa.select(inner.c.inputs).where(inner.c.workflow_uuid == outer).correlate(ws)
    columns = _columns(sys_db, sa.func.coalesce(given.scalar_subquery(), ws.c.inputs))
    dialect = sys_db.engine.dialect
    processors = [
        column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns
    ]

    def status(row: Any) -> dict[str, Any]:
        values = (v if p is None else p(v) for v, p in zip(row, processors, strict=True))
        return _status(dict(zip(_COLUMNS, values, strict=True)))

    return columns, status


def status_of_row(row: Any) -> dict[str, Any]:
    """The status of a row SQLAlchemy returned for the columns of :func:`returned`."""
    return _status(dict(zip(_COLUMNS, row, strict=True)))


_claimed = threading.local()
"""``statuses``: the statuses of the runs this thread's last claim took, as the claim
wrote them, for the status read that follows it."""


RECALL_SECONDS = 0.5
"""How long after its claim a status read may be answered by the claim's statuses."""


def remember(statuses: list[dict[str, Any]]) -> None:
    """Keep the statuses a claim's ``RETURNING`` gave for this thread's next status read
    (DBOS's queue thread reads the runs it claimed at once): that read answers them
    instead of reading them again, if it asks for exactly these runs within
    :data:`RECALL_SECONDS`."""
    _claimed.statuses = statuses
    _claimed.at = time.monotonic()


def _recalled(workflow_ids: list[str]) -> list[dict[str, Any]] | None:
    statuses: list[dict[str, Any]] | None = getattr(_claimed, "statuses", None)
    if statuses is None:
        return None
    _claimed.statuses = None  # one read at most, and only the next one
    if time.monotonic() - _claimed.at > RECALL_SECONDS:
        return None
    if [s["workflow_uuid"] for s in statuses] != workflow_ids:
        return None
    return statuses


def _status(m: Any) -> dict[str, Any]:
    """DBOS's status dictionary of one row's mapping ``m`` (no shard key)."""
    return {
        "workflow_uuid": m["workflow_uuid"],
        "status": m["status"],
        "name": m["name"],
        "recovery_attempts": m["recovery_attempts"],
        "config_name": m["config_name"],
        "class_name": m["class_name"],
        "authenticated_user": m["authenticated_user"],
        "authenticated_roles": m["authenticated_roles"],
        "assumed_role": m["assumed_role"],
        "queue_name": m["queue_name"],
        "executor_id": m["executor_id"],
        "created_at": m["created_at"],
        "updated_at": m["updated_at"],
        "app_version": m["application_version"],
        "app_id": m["application_id"],
        "workflow_deadline_epoch_ms": m["workflow_deadline_epoch_ms"],
        "workflow_timeout_ms": m["workflow_timeout_ms"],
        "deduplication_id": m["deduplication_id"],
        "priority": m["priority"],
        "inputs": m["inputs"],
        "queue_partition_key": m["queue_partition_key"],
        "forked_from": m["forked_from"],
        "parent_workflow_id": m["parent_workflow_id"],
        "started_at_epoch_ms": m["started_at_epoch_ms"],
        "serialization": m["serialization"],
        "delay_until_epoch_ms": m["delay_until_epoch_ms"],
        "attributes": m["attributes"],
        "schedule_name": m["schedule_name"],
        "debounce_deadline_epoch_ms": m["debounce_deadline_epoch_ms"],
        "is_debounced": bool(m["is_debounced"]),
        "application_name": m["application_name"],
        "shard_key": None,
    }


def _reading(sys_db: Any) -> Callable[[list[str]], list[Any]]:
    from dbos._sys_db import SystemDatabase, db_retry

    stock = SystemDatabase.get_workflow_statuses.__get__(sys_db)
    built: dict[int, Any] = {}
    connect = one_statement(sys_db)

    @db_retry(sys_db=sys_db)
    def fetch(workflow_ids: list[str]) -> list[dict[str, Any]]:
        for workflow_id in workflow_ids:
            sys_db._reject_shard_key(workflow_id, None)
        count = len(workflow_ids)
        statement = built.get(count)
        if statement is None:
            statement = built[count] = _statement(sys_db, count)
        params = {f"id{i}": workflow_id for i, workflow_id in enumerate(workflow_ids)}
        with connect() as c:
            rows = c.execute(statement, params).fetchall()
        return [_status(row._mapping) for row in rows]

    def get_workflow_statuses(workflow_ids: list[str]) -> list[Any]:
        recalled = _recalled(workflow_ids)
        if recalled is not None:
            return recalled
        if not workflow_ids or len(workflow_ids) > MAX_PREPARED_IDS:
            return stock(workflow_ids)  # type: ignore[no-any-return]
        found = {status["workflow_uuid"]: status for status in fetch(workflow_ids)}
        return [found[id] for id in workflow_ids if id in found]

    return get_workflow_statuses
