"""DBOS's prepared statements compiled once on SQLite write the rows DBOS's per-call
statements write and raise what they raise, in a client and in the runtime; PostgreSQL
keeps DBOS's own; a DBOS whose prepared statements changed is refused by name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOS, DBOSClient, _dbos
from dbos._error import (
    DBOSConflictingWorkflowError,
    DBOSQueueDeduplicatedError,
    DBOSWorkflowIDInUseError,
)

from tether.durable import DurableConfig, launch, prepared, shutdown_async, tune_client
from tether.errors import ConfigError


@DBOS.workflow(name="prepared.echo")
async def echo(n: int) -> int:
    return n


def _rows(sys_db: Any, wid: str) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    ws, wi = sys_db.tables.workflow_status, sys_db.tables.workflow_input
    with sys_db.engine.begin() as c:
        status = dict(c.execute(sa.select(ws).where(ws.c.workflow_uuid == wid)).one()._mapping)
        inputs = [tuple(r) for r in c.execute(sa.select(wi).where(wi.c.workflow_uuid == wid))]
    for key in ("workflow_uuid", "creator_xid", "created_at", "updated_at"):
        status.pop(key)
    return status, [row[1:] for row in inputs]


@pytest.fixture
def clients(tmp_path: Path) -> Iterator[tuple[DBOSClient, DBOSClient]]:
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    launch(DurableConfig(url, polling_interval_seconds=0.05))
    ours, theirs = DBOSClient(system_database_url=url), DBOSClient(system_database_url=url)
    tune_client(ours)
    yield ours, theirs
    ours.destroy()
    theirs.destroy()


async def test_enqueues_write_what_dbos_writes(clients: tuple[DBOSClient, DBOSClient]) -> None:
    ours, theirs = clients
    sys_db = _dbos._dbos_global_instance._sys_db  # type: ignore[union-attr]
    assert vars(ours._sys_db)["_execute_prepared"].__qualname__.startswith("_compiled_once.")
    assert "_execute_prepared" not in vars(theirs._sys_db)
    assert vars(sys_db)["_execute_prepared"].__qualname__.startswith("_compiled_once.")
    base: dict[str, Any] = {"queue_name": "idle", "workflow_name": "prepared.echo"}
    for i, extra in enumerate(
        [{}, {"priority": 3, "deduplication_id": "d", "authenticated_roles": ["a"]}]
    ):
        for client, who in ((ours, "o"), (theirs, "t")):
            options = {**base, **extra, "workflow_id": f"{who}{i}"}
            if "deduplication_id" in extra:
                options["deduplication_id"] += who
            client.enqueue(options, i, k="v")  # type: ignore[arg-type]
            client.enqueue(options, i, k="v")  # type: ignore[arg-type]  (again: the same row)
        ours_row, theirs_row = _rows(sys_db, f"o{i}"), _rows(sys_db, f"t{i}")
        if "deduplication_id" in extra:
            assert ours_row[0].pop("deduplication_id") == "do"
            assert theirs_row[0].pop("deduplication_id") == "dt"
        assert ours_row == theirs_row
    for client, who in ((ours, "o"), (theirs, "t")):  # what DBOS raises, raised the same
        with pytest.raises(DBOSQueueDeduplicatedError):
            client.enqueue({**base, "deduplication_id": f"d{who}", "workflow_id": f"{who}x"}, 1)
        with pytest.raises(DBOSConflictingWorkflowError):
            client.enqueue({**base, "workflow_name": "other", "workflow_id": f"{who}0"}, 1)
        with pytest.raises(DBOSWorkflowIDInUseError):
            client.enqueue({**base, "workflow_id": f"{who}0", "workflow_id_reuse_policy": "reject"})
    handle = await DBOS.start_workflow_async(echo, 5)  # the runtime's own start
    assert await handle.get_result() == 5
    await shutdown_async()


async def test_postgres_keeps_dbos_own_prepared_statements(pg_url: str) -> None:
    launch(DurableConfig(pg_url, polling_interval_seconds=0.05))
    try:
        assert "_execute_prepared" not in vars(_dbos._dbos_global_instance._sys_db)  # type: ignore[union-attr]
        handle = await DBOS.start_workflow_async(echo, 3)
        assert await handle.get_result() == 3
    finally:
        await shutdown_async()


def test_a_dbos_whose_prepared_statements_changed_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prepared._verify()  # the pinned DBOS: its method is the one reproduced
    monkeypatch.setattr(prepared, "_EXPECTED_DIGEST", "0" * 16)
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        prepared._verify()


def test_another_database_keeps_dbos_methods() -> None:
    class Other:
        pass

    assert prepared.install(Other()) is False
