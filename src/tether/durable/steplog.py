"""A step's two writes to the DBOS log as SQL compiled once, not built per call.

Every step DBOS runs costs two calls on its system database: ``check_operation_execution``
(is the step in the log already?) before the body and ``record_operation_result`` (log its
output) after it. DBOS 3.4 builds their SQLAlchemy statements anew on every call (the
statement, its cache key, and on PostgreSQL a compilation: SQLAlchemy does not cache its
``INSERT ... ON CONFLICT``), which was most of a logged step's CPU. :func:`install` replaces
the two methods on the running system database by the same statements as fixed SQL text
(the status and output reads joined into one): the same rows, the same transaction, the
same owner check (the row stays locked until the commit), the same conflict rule (a step
row already there with another completion time is nondeterminism), the same retries. An
owned record (the run's owner checked) is one statement on both databases (an
``INSERT ... SELECT`` from the run's row where the owner is the caller's): SQLite takes
its write lock at that statement as it took it at the owner check before.

A run's first check after this process inserted its row (a direct start, or a run written
claimed by :func:`~tether.durable.handoff.enqueue_claimed`) reads nothing: the insert
carried a new token that owns the run's first execution, only the owner logs a step, and
nothing is logged before the first step's check. The check knows the run by that token
(:func:`_mark_fresh`): any later execution of the same run (recovered after a crash, put
back on its queue, resumed) holds another token and reads the log. That execution's first
step then starts without the status read: a cancel written between the run's start and
its first step is seen at the step's record (the run is no longer its owner's) or at the
next check, as a cancel written during the step is.

It relies on DBOS's private methods, checked in one place: :func:`install` compares their
source with the one this module was written against and raises :class:`ConfigError`,
naming the installed DBOS, if a release changed any of them
(``tests/durable/test_steplog.py`` says so too), never silently.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from tether.durable.fence import one_statement, require_known, source_digest

_CHECKED = (
    "init_workflow",
    "_insert_workflow_status",
    "check_operation_execution",
    "_check_operation_execution_txn",
    "record_operation_result",
    "_record_operation_result_txn",
    "_check_owner_txn",
    "_now_ms_sql",
    "_key_conflict",
    "_key_column",
    "_wf",
    "_wf_values",
    "_child_values",
    "_own_key",
)
"""The SystemDatabase methods whose behaviour the replacements reproduce."""

_EXPECTED_DIGEST = "16c20cbca167b48e"
"""Digest of the methods in ``_CHECKED`` in the DBOS these replacements reproduce (3.4.0)."""


def _source_digest() -> str:
    from dbos._sys_db import SystemDatabase

    return source_digest(*(getattr(SystemDatabase, name) for name in _CHECKED))


_verified: bool | None = None


def _verify() -> None:
    global _verified
    if _verified is None:
        _verified = _source_digest() == _EXPECTED_DIGEST
    require_known(
        _EXPECTED_DIGEST if _verified else "changed", _EXPECTED_DIGEST, "its step log methods"
    )


def _statements(sys_db: Any) -> tuple[str, str, str]:
    """The check, the insert, and the owner check with the insert as one statement, for
    this database, with ``:name`` parameters (psycopg's on PostgreSQL)."""
    oo = sys_db.tables.operation_outputs
    ws = sys_db.tables.workflow_status
    if sys_db._is_sqlite:
        prefix = ""
        if sys.version_info >= (3, 12):
            now = "CAST(unixepoch('subsec') * 1000 AS BIGINT)"
        else:
            now = "CAST(strftime('%s', 'now') * 1000 AS BIGINT)"
    else:
        prefix = f'"{sys_db.schema}".'
        now = "CAST(EXTRACT(epoch FROM now()) * 1000 AS BIGINT)"
    check = (
        f"SELECT s.status, o.function_id, o.output, o.error, o.function_name,"
        f" o.child_workflow_id, o.serialization FROM {prefix}{ws.name} AS s"
        f" LEFT JOIN {prefix}{oo.name} AS o"
        f" ON o.workflow_uuid = s.workflow_uuid AND o.function_id = :f"
        f" WHERE s.workflow_uuid = :w"
    )
    columns = (
        f"INSERT INTO {prefix}{oo.name} (workflow_uuid, function_id, function_name,"
        " started_at_epoch_ms, completed_at_epoch_ms, output, error, child_workflow_id,"
        " serialization, application_name, retention_timestamp)"
    )
    values = (
        f":w, :f, :name, :started, :completed, :output, :error, :child, :serialization, :app, {now}"
    )
    conflict = (
        " ON CONFLICT (workflow_uuid, function_id) DO UPDATE SET"
        f" completed_at_epoch_ms = {oo.name}.completed_at_epoch_ms"
        " RETURNING completed_at_epoch_ms"
    )
    insert = f"{columns} VALUES ({values}){conflict}"
    if sys_db._is_sqlite:
        # the step inserted only if the run is still the caller's, in the transaction that
        # took the write lock at its start: no row back means another execution owns it
        owned = (
            f"{columns} SELECT {values} FROM {ws.name}"
            f" WHERE workflow_uuid = :w AND owner_xid = :owner{conflict}"
        )
        return check, insert, owned
    # the run's row locked, then the step inserted only if the run is still the caller's:
    # no row back means another execution owns it (the same order and locks as two calls)
    owner = f"SELECT owner_xid FROM {prefix}{ws.name} WHERE workflow_uuid=:w FOR NO KEY UPDATE"
    owned = (
        f"WITH owner AS ({owner}) {columns} SELECT {_typed(values)} FROM owner"
        f" WHERE owner.owner_xid = :owner{conflict}"
    )
    return tuple(  # type: ignore[return-value]
        re.sub(r":(\w+)", r"%(\1)s", s)  # psycopg's parameter style
        for s in (check, insert, owned)
    )


def _typed(values: str) -> str:
    """The VALUES list with each parameter cast to its column's type (a SELECT list does
    not take them from the insert's columns)."""
    types = {
        ":w": "TEXT",
        ":f": "INTEGER",
        ":name": "TEXT",
        ":started": "BIGINT",
        ":completed": "BIGINT",
        ":output": "TEXT",
        ":error": "TEXT",
        ":child": "TEXT",
        ":serialization": "TEXT",
        ":app": "TEXT",
    }
    for name, sql_type in types.items():
        values = re.sub(rf"{name}\b", f"CAST({name} AS {sql_type})", values)
    return values


def install(sys_db: Any) -> bool:
    """Replace the two step methods of DBOS's running system database ``sys_db`` (a plain
    SQLite or PostgreSQL one: a sharded database keeps DBOS's own); whether it did."""
    from dbos._sys_db_postgres import PostgresSystemDatabase
    from dbos._sys_db_sqlite import SQLiteSystemDatabase

    if type(sys_db) not in (SQLiteSystemDatabase, PostgresSystemDatabase):
        return False
    _verify()
    check_sql, insert_sql, owned_sql = _statements(sys_db)
    sys_db.check_operation_execution = _check(sys_db, check_sql)
    sys_db.record_operation_result = _record(sys_db, insert_sql, owned_sql)
    sys_db.init_workflow = _noting_inserts(sys_db.init_workflow)
    with _fresh_lock:  # runs of an earlier launch's log are not this one's
        _fresh.clear()
    return True


MAX_FRESH = 4096
"""The most runs remembered as just inserted and not yet checked (the oldest go first:
their first check then reads the log, as any check does)."""

_fresh: dict[str, str] = {}
"""Runs this process inserted, with the token of their first execution, until their
first check."""
_fresh_lock = threading.Lock()


def _noting_inserts(init: Callable[..., Any]) -> Callable[..., Any]:
    """``init_workflow`` noting each run it inserted to start at once (PENDING, carrying
    the caller's new token: DBOS's ``should_execute``)."""

    def init_workflow(status: Any, *args: Any, **kwargs: Any) -> Any:
        written, started_here = init(status, *args, **kwargs)
        token = kwargs.get("creator_xid")
        if started_here and token is not None and written == status["status"] == "PENDING":
            _mark_fresh(status["workflow_uuid"], token)
        return written, started_here

    return init_workflow


def _mark_fresh(workflow_id: str, token: str) -> None:
    """Say that ``workflow_id``'s execution owned by ``token`` has logged nothing yet."""
    with _fresh_lock:
        while len(_fresh) >= MAX_FRESH:
            del _fresh[next(iter(_fresh))]
        _fresh[workflow_id] = token


def starting(workflow_id: str) -> bool:
    """Whether this process inserted ``workflow_id`` to start it at once and its first
    execution has not checked a step yet (it may not run yet)."""
    return workflow_id in _fresh


def _first_of_fresh(workflow_id: str) -> bool:
    """Whether this check is the first of an execution that has logged nothing: the run's
    inserted token is the calling execution's (forgotten either way)."""
    from dbos._context import current_owner_xid

    with _fresh_lock:
        token = _fresh.pop(workflow_id, None)
    return token is not None and token == current_owner_xid(workflow_id)


def _check(sys_db: Any, sql: str) -> Callable[..., Any]:
    from dbos._error import DBOSUnexpectedStepError, DBOSWorkflowCancelledError
    from dbos._sys_db import WorkflowStatusString, db_retry

    cancelled = WorkflowStatusString.CANCELLED.value
    connect = one_statement(sys_db)

    @db_retry(sys_db=sys_db)
    def check_operation_execution(
        workflow_id: str, function_id: int, function_name: str, *, owner_key: str | None = None
    ) -> dict[str, Any] | None:
        if _fresh and _first_of_fresh(workflow_id):
            return None  # nothing logged yet: see the module
        with sys_db._own_key(workflow_id, key=owner_key), connect() as c:
            sys_db._reject_shard_key(workflow_id, None)
            row = c.exec_driver_sql(sql, {"w": workflow_id, "f": function_id}).first()
        assert row is not None, f"Error: Workflow {workflow_id} does not exist"
        status, found, output, error, recorded_name, child_id, serialization = row
        if status == cancelled:
            raise DBOSWorkflowCancelledError(
                f"Workflow {workflow_id} is cancelled. Aborting function."
            )
        if found is None:
            return None
        if function_name != recorded_name:
            raise DBOSUnexpectedStepError(
                workflow_id=workflow_id,
                step_id=function_id,
                expected_name=function_name,
                recorded_name=recorded_name,
            )
        return {
            "output": output,
            "error": error,
            "serialization": serialization,
            "child_workflow_id": child_id,
            "child_shard_key": None,
        }

    return check_operation_execution


def _record(sys_db: Any, insert_sql: str, owned_sql: str) -> Callable[..., None]:
    from dbos._context import current_owner_xid
    from dbos._debug_trigger import DebugTriggers
    from dbos._error import DBOSStepNondeterminismError, DBOSWorkflowConflictIDError
    from dbos._sys_db import db_retry
    from sqlalchemy.exc import DBAPIError

    connect = one_statement(sys_db)  # every record is one statement (the owner check within it)

    def record_operation_result(
        result: Any,
        *,
        completed_at_epoch_ms: int | None = None,
        owner_xid: str | None = None,
        owner_key: str | None = None,
    ) -> None:
        completed = (
            completed_at_epoch_ms if completed_at_epoch_ms is not None else int(time.time() * 1000)
        )
        workflow_id = result["workflow_uuid"]
        error, output = result["error"], result["output"]
        assert error is None or output is None, "Only one of error or output can be set"
        values = {
            "w": workflow_id,
            "f": result["function_id"],
            "name": result["function_name"],
            "started": result["started_at_epoch_ms"],
            "completed": completed,
            "output": output,
            "error": error,
            "child": result["child_workflow_id"],
            "serialization": result["serialization"],
            "app": sys_db.app_name,
        }

        @db_retry(sys_db=sys_db)
        def record_operation_result_retry() -> None:
            with sys_db._own_key(workflow_id, key=owner_key), connect() as c:
                sys_db._reject_shard_key(workflow_id, None)
                owner = owner_xid if owner_xid is not None else current_owner_xid(workflow_id)
                sql, params = insert_sql, values
                if owner is not None:
                    sql, params = owned_sql, {**values, "owner": owner}
                try:
                    rows = c.exec_driver_sql(sql, params).fetchall()
                    if not rows and sql is owned_sql:  # the run is not the caller's
                        raise DBOSWorkflowConflictIDError(workflow_id)
                except DBAPIError as exc:
                    if sys_db._is_unique_constraint_violation(exc):
                        raise DBOSStepNondeterminismError(
                            workflow_id, result["function_id"]
                        ) from exc
                    raise
                if rows and (rows[0][0] is None or int(rows[0][0]) != completed):
                    raise DBOSStepNondeterminismError(workflow_id, result["function_id"])
            DebugTriggers.debug_trigger_point(DebugTriggers.DEBUG_TRIGGER_STEP_COMMIT)

        record_operation_result_retry()

    return record_operation_result
