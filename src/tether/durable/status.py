"""Cheap reads of the durable log's workflow status: one primary-key statement each.

``DBOSClient.list_workflows`` builds a query of some thirty columns, with filters, order
and optional joins, each time it is called, and turns each row into a ``WorkflowStatus``;
for "is this workflow in the log, and in which status and version?" asked once per staff
decision or per batch of new tickets, that is most of the cost. A :class:`WorkflowLog`
answers it from DBOS's ``workflow_status`` table (schema ``dbos`` on PostgreSQL, none on
SQLite) with statements built once::

    log = WorkflowLog.of_client(client)
    row = log.get("desk-ticket-12")  # None: no such workflow
    queued = log.existing(["desk-ticket-12", "desk-ticket-13"])

The table and its columns are DBOS's private knowledge, for want of a public API in dbos
3.4: they are named in this one module and checked against the installed DBOS's own
definition when a log is first opened, so a DBOS release that renames them fails here,
loudly (a :class:`~tether.errors.ConfigError`), never by reading nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import sqlalchemy as sa

from tether.durable.fence import unknown_dbos
from tether.errors import ConfigError

TABLE = "workflow_status"
COLUMNS = ("workflow_uuid", "status", "name", "application_version", "executor_id", "queue_name")
"""The columns read; ``workflow_uuid`` is the table's primary key."""


@dataclass(frozen=True, slots=True)
class WorkflowRow:
    """One workflow as the log holds it now."""

    workflow_id: str
    status: str
    """DBOS's status: ``ENQUEUED``, ``PENDING``, ``SUCCESS``, ``ERROR``, ``CANCELLED``..."""
    name: str | None
    """The workflow function's registered name."""
    app_version: str | None
    """The application version that logged it (only a process of that version runs it)."""
    executor_id: str | None
    queue_name: str | None


@dataclass(frozen=True, slots=True)
class _Statements:
    by_id: sa.Select[Any]
    among: sa.Select[Any]


@lru_cache(maxsize=4)
def _statements(schema: str | None) -> _Statements:
    """The statements for the table in ``schema``, built once per schema."""
    table = sa.Table(TABLE, sa.MetaData(), *(sa.Column(c, sa.Text) for c in COLUMNS), schema=schema)
    uuid = table.c.workflow_uuid
    return _Statements(
        by_id=sa.select(*table.c).where(uuid == sa.bindparam("workflow_id")),
        among=sa.select(uuid).where(uuid.in_(sa.bindparam("workflow_ids", expanding=True))),
    )


class WorkflowLog:
    """Reads of one durable log's workflow status (see the module doc); thread-safe, as
    the engine it reads through."""

    def __init__(self, engine: sa.Engine, schema: str | None) -> None:
        """``engine``: one on the DBOS system database; ``schema``: where DBOS keeps its
        tables there (``None`` on SQLite)."""
        check_dbos_schema()
        self.engine = engine
        self.schema = schema
        self._sql = _statements(schema)

    @classmethod
    def of_client(cls, client: Any) -> WorkflowLog:
        """The log a :class:`dbos.DBOSClient` reads, through the client's own engine and
        connections (no pool of its own)."""
        try:
            sys_db = client._sys_db
            engine, schema = sys_db.engine, sys_db.schema
            sharded = sys_db._key_column(sys_db.tables.workflow_status) is not None
        except AttributeError as exc:
            raise unknown_dbos(str(exc)) from exc
        if sharded:  # a workflow's row is found by its shard key too
            raise ConfigError("tether.durable.status cannot read a sharded DBOS log")
        return cls(engine, schema)

    def get(self, workflow_id: str) -> WorkflowRow | None:
        """The workflow's row, or ``None`` if the log holds no workflow of that id."""
        with self.engine.connect() as c:
            row = c.execute(self._sql.by_id, {"workflow_id": workflow_id}).one_or_none()
        if row is None:
            return None
        uuid, status, name, version, executor, queue = row
        return WorkflowRow(uuid, status, name, version, executor, queue)

    def existing(self, workflow_ids: Iterable[str]) -> set[str]:
        """The ids among ``workflow_ids`` that the log holds (in any status)."""
        ids = list(dict.fromkeys(workflow_ids))
        if not ids:
            return set()
        with self.engine.connect() as c:
            return set(c.scalars(self._sql.among, {"workflow_ids": ids}))


@lru_cache(maxsize=1)
def check_dbos_schema() -> None:
    """Check that the installed DBOS keeps workflows where this module reads them (its
    ``workflow_status`` table, keyed by ``workflow_uuid``, with :data:`COLUMNS`); raise
    :class:`~tether.errors.ConfigError` otherwise. Checked once per process."""
    try:
        from dbos._schemas.system_database import SystemSchema

        table = SystemSchema.workflow_status
        names = set(table.c.keys())
        key = [c.name for c in table.primary_key.columns]
        name = table.name
    except (ImportError, AttributeError) as exc:
        raise unknown_dbos(str(exc)) from exc
    missing = [c for c in COLUMNS if c not in names]
    if name != TABLE or key != ["workflow_uuid"] or missing:
        raise unknown_dbos(f"its table {name!r} is keyed by {key} and lacks the columns {missing}")
