"""A workflow's outcome on a SQLite log as SQL compiled once, not built per call.

At a workflow's end DBOS 3.4 writes its outcome with ``update_workflow_outcome``. On
PostgreSQL that is one statement DBOS compiles once; on SQLite (which cannot put an UPDATE
in a WITH clause) it is ``_update_workflow_outcome_in_transaction``: an UPDATE of the
status row and an upsert of the output, both built as SQLAlchemy statements anew on every
call. :func:`install` replaces that method on a running SQLite system database by the same
two statements as fixed SQL text: the same transaction (SQLite's ``BEGIN IMMEDIATE``), the
same rows, the same conditions (a PENDING row, owned by ``owner_xid`` when one is given),
the same result (False, and no output written, when the status write did not land).
``update_workflow_outcome`` itself, with its retries and its default owner, stays DBOS's.
The status update also returns the row's serialization, kept for the thread that wrote
(:func:`landed_serialization`): :mod:`~tether.durable.results` hands the row written to
the workflow's waiters with it, instead of their reading it back.

The method's source and those it relies on are checked against the DBOS this was written
for: :func:`install` raises :class:`ConfigError`, naming the installed DBOS, if a release
changed them (``tests/durable/test_outcome.py``).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from tether.durable.fence import require_known, source_digest

_CHECKED = (
    "update_workflow_outcome",
    "_outcome_in_one_statement",
    "_update_workflow_outcome_in_transaction",
    "_now_ms_sql",
    "_wf",
    "_wf_values",
    "_key_conflict",
    "_execute_prepared",
)
"""The SystemDatabase methods whose behaviour the replacement reproduces."""

_EXPECTED_DIGEST = "f40c534ede06314a"
"""Digest of the methods in ``_CHECKED`` in the DBOS this reproduces (3.4.0)."""


_written = threading.local()
"""``row``: (workflow id, serialization) of the last outcome this thread wrote."""


def landed_serialization(workflow_id: str) -> tuple[bool, str | None]:
    """Whether this thread's last outcome write was ``workflow_id``'s and landed, and the
    serialization its row holds (forgotten once asked)."""
    row: tuple[str, str | None] | None = getattr(_written, "row", None)
    _written.row = None
    if row is None or row[0] != workflow_id:
        return False, None
    return True, row[1]


def _source_digest() -> str:
    from dbos._sys_db import SystemDatabase

    return source_digest(*(getattr(SystemDatabase, name) for name in _CHECKED))


def _verify() -> None:
    require_known(_source_digest(), _EXPECTED_DIGEST, "its workflow outcome write")


def _statements(sys_db: Any) -> tuple[str, str, str]:
    """The status update (unowned, owned) and the output upsert, with ``?`` parameters."""
    ws, wo = sys_db.tables.workflow_status, sys_db.tables.workflow_output
    if sys.version_info >= (3, 12):
        now = "CAST(unixepoch('subsec') * 1000 AS BIGINT)"
    else:
        now = "CAST(strftime('%s', 'now') * 1000 AS BIGINT)"
    update = (
        f"UPDATE {ws.name} SET status=?, deduplication_id=NULL, owner_xid=NULL,"
        f" updated_at={now}, completed_at={now}"
        " WHERE workflow_uuid = ? AND status = 'PENDING'"
    )
    returning = " RETURNING serialization"
    upsert = (
        f"INSERT INTO {wo.name} (workflow_uuid, output, error) VALUES (?, ?, ?)"
        " ON CONFLICT (workflow_uuid) DO UPDATE SET output = excluded.output,"
        " error = excluded.error"
    )
    return update + returning, update + " AND owner_xid = ?" + returning, upsert


def install(sys_db: Any) -> bool:
    """Replace the outcome's transaction of DBOS's running system database ``sys_db`` if it
    is a plain SQLite one (PostgreSQL's is compiled once by DBOS already); whether it did."""
    from dbos._sys_db_sqlite import SQLiteSystemDatabase

    if type(sys_db) is not SQLiteSystemDatabase:
        return False
    _verify()
    replacement = _in_transaction(sys_db, *_statements(sys_db))
    setattr(sys_db, "_update_workflow_outcome_in_transaction", replacement)  # noqa: B010
    return True


def _in_transaction(
    sys_db: Any, update_sql: str, owned_sql: str, upsert_sql: str
) -> Callable[..., bool]:
    def _update_workflow_outcome_in_transaction(
        workflow_id: str,
        status: str,
        *,
        output: str | None,
        error: str | None,
        owner_xid: str | None,
    ) -> bool:
        sys_db._reject_shard_key(workflow_id, None)
        _written.row = None
        with sys_db.engine.begin() as c:
            if owner_xid is None:
                updated = c.exec_driver_sql(update_sql, (status, workflow_id)).all()
            else:
                updated = c.exec_driver_sql(owned_sql, (status, workflow_id, owner_xid)).all()
            if not updated:
                return False  # the outcome was not ours to write: no orphan output
            c.exec_driver_sql(upsert_sql, (workflow_id, output, error))
        _written.row = (workflow_id, updated[0][0])  # committed
        return True

    return _update_workflow_outcome_in_transaction
