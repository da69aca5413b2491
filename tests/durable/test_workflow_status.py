"""The cheap reads of a workflow's status (:mod:`tether.durable.status`) say what DBOS's own
``list_workflows`` says, on SQLite and on PostgreSQL (its ``dbos`` schema, or another one
the client names); a DBOS whose table is not the one they read fails loudly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOS, DBOSClient
from dbos._schemas import system_database
from sqlalchemy.engine import make_url

from tether.durable.status import WorkflowLog, WorkflowRow, check_dbos_schema
from tether.errors import ConfigError


def _options(workflow_id: str, version: str) -> Any:
    return {
        "queue_name": "q",
        "workflow_name": "some.workflow",
        "workflow_id": workflow_id,
        "app_version": version,
    }


@pytest.fixture(params=["sqlite", "postgresql", "postgresql-own-schema"])
def client(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DBOSClient]:
    """A DBOS client on a migrated, empty log."""
    schema = "desk_log" if request.param == "postgresql-own-schema" else "dbos"
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    else:
        pg = make_url(request.getfixturevalue("pg_url"))
        url = pg.set(drivername="postgresql").render_as_string(hide_password=False)
    DBOS.migrate(url, schema=schema)
    c = DBOSClient(system_database_url=url, application_name="t", dbos_system_schema=schema)
    yield c
    c.destroy()


def test_a_workflow_reads_as_dbos_lists_it(client: DBOSClient) -> None:
    log = WorkflowLog.of_client(client)
    assert log.get("wf-1") is None and log.existing(["wf-1"]) == set() == log.existing([])
    client.enqueue(_options("wf-1", "7"), 1)
    client.enqueue(_options("wf-2", "8"), 2)
    row = log.get("wf-1")
    (listed,) = client.list_workflows(workflow_ids=["wf-1"], load_input=False, load_output=False)
    assert row == WorkflowRow(
        "wf-1",
        listed.status,
        listed.name,
        listed.app_version,
        listed.executor_id,
        listed.queue_name,
    )
    assert row is not None
    assert (row.status, row.name, row.app_version, row.queue_name) == (
        "ENQUEUED",
        "some.workflow",
        "7",
        "q",
    )
    assert log.existing(["wf-2", "wf-3", "wf-1", "wf-2"]) == {"wf-1", "wf-2"}
    client.cancel_workflow("wf-2")
    cancelled = log.get("wf-2")
    assert cancelled is not None and (cancelled.status, cancelled.app_version) == ("CANCELLED", "8")


def test_it_reads_through_the_clients_own_connections(client: DBOSClient) -> None:
    log = WorkflowLog.of_client(client)
    engine: sa.Engine = log.engine
    checkouts: list[object] = []
    sa.event.listen(engine, "checkout", lambda *a: checkouts.append(a))
    client.enqueue(_options("wf-1", "1"), 1)
    before = len(checkouts)
    assert log.get("wf-1") is not None
    assert len(checkouts) == before + 1  # one connection from the client's pool, one read


def test_a_dbos_whose_status_table_changed_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    renamed = sa.Table(
        "workflow_status",
        sa.MetaData(),
        sa.Column("workflow_uuid", sa.Text, primary_key=True),
        sa.Column("state", sa.Text),  # was "status"
    )
    monkeypatch.setattr(system_database.SystemSchema, "workflow_status", renamed)
    check_dbos_schema.cache_clear()
    try:
        with pytest.raises(ConfigError, match=r"does not know this DBOS.*'status'"):
            WorkflowLog(sa.create_engine("sqlite://"), None)
    finally:
        monkeypatch.undo()
        check_dbos_schema.cache_clear()
    WorkflowLog(sa.create_engine("sqlite://"), None)  # the installed DBOS passes


def test_a_client_without_its_log_where_expected_fails_loudly() -> None:
    class Moved:
        pass

    with pytest.raises(ConfigError, match="does not know this DBOS"):
        WorkflowLog.of_client(Moved())
