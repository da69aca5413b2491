"""A workflow's outcome on a SQLite log, written by fixed SQL, leaves the rows DBOS's own
method leaves and answers what it answers; PostgreSQL keeps DBOS's own (compiled once by
DBOS); a DBOS whose outcome write changed is refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOS, _dbos
from dbos._sys_db import SystemDatabase

from tether.durable import DurableConfig, launch, outcome, shutdown_async
from tether.errors import ConfigError


@DBOS.workflow(name="outcome.echo")
async def echo(n: int) -> int:
    return n


def _sys_db() -> Any:
    return _dbos._dbos_global_instance._sys_db  # type: ignore[union-attr]


def _pending(sys_db: Any, *ids: str) -> None:
    """Put runs back as a running execution "me" leaves them, with no output."""
    ws, wo = sys_db.tables.workflow_status, sys_db.tables.workflow_output
    with sys_db.engine.begin() as c:
        c.execute(
            sa.update(ws)
            .where(ws.c.workflow_uuid.in_(ids))
            .values(status="PENDING", owner_xid="me", deduplication_id="d", completed_at=None)
        )
        c.execute(sa.delete(wo).where(wo.c.workflow_uuid.in_(ids)))


def _rows(sys_db: Any, wid: str) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    ws, wo = sys_db.tables.workflow_status, sys_db.tables.workflow_output
    with sys_db.engine.begin() as c:  # the times compared apart: set by the database's clock
        status = dict(c.execute(sa.select(ws).where(ws.c.workflow_uuid == wid)).one()._mapping)
        out = c.execute(sa.select(wo.c.output, wo.c.error).where(wo.c.workflow_uuid == wid))
        stored = [tuple(r) for r in out]
    for key in ("workflow_uuid", "creator_xid", "created_at"):
        status.pop(key)
    for key in ("updated_at", "completed_at"):
        status[key] = status[key] is not None
    return status, stored


async def test_outcomes_write_what_dbos_writes(tmp_path: Path) -> None:
    launch(DurableConfig(f"sqlite:///{tmp_path / 'runs.sqlite'}", polling_interval_seconds=0.05))
    try:
        sys_db = _sys_db()
        ours = sys_db._update_workflow_outcome_in_transaction
        assert ours.__qualname__.startswith("_in_transaction.")
        handles = [await DBOS.start_workflow_async(echo, n) for n in (1, 2)]
        assert [await h.get_result() for h in handles] == [1, 2]  # finished through ours
        theirs_id, ours_id = (h.get_workflow_id() for h in handles)
        theirs = SystemDatabase._update_workflow_outcome_in_transaction.__get__(sys_db)
        cases: list[dict[str, Any]] = [
            {"status": "SUCCESS", "output": '"7"', "error": None, "owner_xid": None},
            {"status": "ERROR", "output": None, "error": '"boom"', "owner_xid": "me"},
            {"status": "SUCCESS", "output": '"7"', "error": None, "owner_xid": "someone-else"},
        ]
        for case in cases:
            _pending(sys_db, theirs_id, ours_id)
            landed = theirs(theirs_id, **case)
            assert ours(ours_id, **case) is landed is (case["owner_xid"] != "someone-else")
            assert _rows(sys_db, ours_id) == _rows(sys_db, theirs_id)
            # a run already finished, or unknown, is not written again
            assert ours(ours_id, **case) is theirs(theirs_id, **case) is False
            assert _rows(sys_db, ours_id) == _rows(sys_db, theirs_id)
        assert ours("no-such-run", **cases[0]) is theirs("no-such-run", **cases[0]) is False
        _pending(sys_db, ours_id)  # and through DBOS's public entry, with its retries
        assert sys_db.update_workflow_outcome(ours_id, "SUCCESS", output='"9"', owner_xid="me")
        assert _rows(sys_db, ours_id)[1] == [('"9"', None)]
    finally:
        await shutdown_async()


async def test_postgres_keeps_dbos_own_outcome_statement(pg_url: str) -> None:
    launch(DurableConfig(pg_url, polling_interval_seconds=0.05))
    try:
        sys_db = _sys_db()
        assert "_update_workflow_outcome_in_transaction" not in vars(sys_db)
        handle = await DBOS.start_workflow_async(echo, 3)
        assert await handle.get_result() == 3
    finally:
        await shutdown_async()


def test_a_dbos_whose_outcome_write_changed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    outcome._verify()  # the pinned DBOS: its method is the one reproduced
    monkeypatch.setattr(outcome, "_EXPECTED_DIGEST", "0" * 16)
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        outcome._verify()


def test_another_database_keeps_dbos_methods() -> None:
    class Other:
        pass

    assert outcome.install(Other()) is False
