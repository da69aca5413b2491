"""The step log's precompiled statements write what DBOS's own methods write, and raise
what they raise; a run this process just inserted reads no log before its first step,
any other execution does; a DBOS whose step methods changed is refused by name."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOS, _dbos
from dbos._error import (
    DBOSStepNondeterminismError,
    DBOSUnexpectedStepError,
    DBOSWorkflowCancelledError,
    DBOSWorkflowConflictIDError,
)
from dbos._sys_db import SystemDatabase
from statements import statements

from tether.durable import DurableConfig, launch, shutdown_async, steplog
from tether.errors import ConfigError

calls: list[int] = []


@DBOS.workflow(name="steplog.twice")
async def twice(n: int) -> int:
    async def add(k: int) -> int:
        calls.append(k)
        return k + 1

    first = await DBOS.run_step_async({"name": "steplog.add"}, add, n)
    return await DBOS.run_step_async({"name": "steplog.add"}, add, first)


def _sys_db() -> Any:
    return _dbos._dbos_global_instance._sys_db  # type: ignore[union-attr]


def _step(workflow_id: str, function_id: int, **over: Any) -> dict[str, Any]:
    return {
        "workflow_uuid": workflow_id,
        "function_id": function_id,
        "function_name": "steplog.add",
        "output": '{"n": 1}',
        "error": None,
        "serialization": "json",
        "started_at_epoch_ms": 1_000,
        "child_workflow_id": None,
        **over,
    }


async def _twice_run() -> str:
    """The id of a run of ``twice`` started here, once it has ended."""
    handle = await DBOS.start_workflow_async(twice, 1)
    assert await handle.get_result() == 3
    return handle.get_workflow_id()


def _row(sys_db: Any, workflow_id: str, function_id: int) -> dict[str, Any]:
    oo = sys_db.tables.operation_outputs
    with sys_db.engine.begin() as c:
        row = c.execute(
            sa.select(oo).where(oo.c.workflow_uuid == workflow_id, oo.c.function_id == function_id)
        ).one()
    return dict(row._mapping)


async def test_steps_log_and_replay_through_the_compiled_statements(log_url: str) -> None:
    calls.clear()
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    try:
        sys_db = _sys_db()
        assert sys_db.check_operation_execution.__qualname__.startswith("_check.")
        assert sys_db.record_operation_result.__qualname__.startswith("_record.")
        handle = await DBOS.start_workflow_async(twice, 1)
        assert await handle.get_result() == 3
        wid = handle.get_workflow_id()
        steps = await DBOS.list_workflow_steps_async(wid)
        assert [s["function_name"] for s in steps] == ["steplog.add", "steplog.add"]
        logged = sys_db.check_operation_execution(wid, steps[0]["function_id"], "steplog.add")
        assert logged is not None and logged["error"] is None and calls == [1, 2]

        # the same step written by DBOS's own method and by the compiled one: same row
        stock = SystemDatabase.record_operation_result.__get__(sys_db)
        stock(_step(wid, 100), completed_at_epoch_ms=5_000)
        sys_db.record_operation_result(_step(wid, 101), completed_at_epoch_ms=5_000)
        ours, theirs = _row(sys_db, wid, 101), _row(sys_db, wid, 100)
        assert abs(ours.pop("retention_timestamp") - theirs.pop("retention_timestamp")) < 60_000
        assert {**ours, "function_id": 100} == theirs
        fresh = SystemDatabase.check_operation_execution.__get__(sys_db)
        assert sys_db.check_operation_execution(wid, 101, "steplog.add") == fresh(
            wid, 100, "steplog.add"
        )
        assert sys_db.check_operation_execution(wid, 102, "steplog.add") is None

        # what DBOS raises, raised the same
        with pytest.raises(DBOSUnexpectedStepError):
            sys_db.check_operation_execution(wid, 101, "another.step")
        with pytest.raises(DBOSStepNondeterminismError):  # the same step, another execution
            sys_db.record_operation_result(_step(wid, 101), completed_at_epoch_ms=6_000)
        sys_db.record_operation_result(_step(wid, 101), completed_at_epoch_ms=5_000)  # a retry
        with pytest.raises(DBOSWorkflowConflictIDError):  # another execution owns the run
            sys_db.record_operation_result(_step(wid, 103), owner_xid="someone-else")
        assert sys_db.check_operation_execution(wid, 103, "steplog.add") is None  # nothing
        with pytest.raises(AssertionError, match="does not exist"):
            sys_db.check_operation_execution("no-such-run", 0, "steplog.add")
        ws = sys_db.tables.workflow_status
        with sys_db.engine.begin() as c:  # as a cancel from another process leaves it
            c.execute(sa.update(ws).where(ws.c.workflow_uuid == wid).values(status="CANCELLED"))
        for check in (fresh, sys_db.check_operation_execution):
            with pytest.raises(DBOSWorkflowCancelledError):
                check(wid, 1, "steplog.add")
    finally:
        await shutdown_async()


def test_a_dbos_whose_step_methods_changed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    steplog._verify()  # the pinned DBOS: its methods are the ones reproduced
    monkeypatch.setattr(steplog, "_EXPECTED_DIGEST", "0" * 16)
    monkeypatch.setattr(steplog, "_verified", None)
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        steplog._verify()


def test_a_sharded_or_unknown_database_keeps_dbos_methods() -> None:
    class Other:
        pass

    assert steplog.install(Other()) is False


async def test_an_owned_record_is_one_statement(log_url: str) -> None:
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    try:
        sys_db = _sys_db()
        wid = await _twice_run()
        ws = sys_db.tables.workflow_status
        with sys_db.engine.begin() as c:  # the run held again, by an execution of its own
            c.execute(sa.update(ws).where(ws.c.workflow_uuid == wid).values(owner_xid="mine"))
        with statements(sys_db.engine) as seen:
            sys_db.record_operation_result(_step(wid, 100), owner_xid="mine")
            assert len(seen) == 1, seen
            with pytest.raises(DBOSWorkflowConflictIDError):
                sys_db.record_operation_result(_step(wid, 101), owner_xid="someone-else")
            assert len(seen) == 2, seen
        assert _row(sys_db, wid, 100)["output"] == '{"n": 1}'
        assert sys_db.check_operation_execution(wid, 101, "steplog.add") is None
    finally:
        await shutdown_async()


_CHECK = "LEFT JOIN"
"""What the step check's statement holds (the status joined to the step's row)."""


async def test_a_run_started_here_reads_no_log_before_its_first_step(log_url: str) -> None:
    calls.clear()
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    try:
        sys_db = _sys_db()
        checks: list[str] = []

        def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if _CHECK in statement and "operation_outputs" in statement:
                checks.append(statement)

        sa.event.listen(sys_db.engine, "before_cursor_execute", note)
        try:
            handle = await DBOS.start_workflow_async(twice, 1)
            assert await handle.get_result() == 3
        finally:
            sa.event.remove(sys_db.engine, "before_cursor_execute", note)
        assert calls == [1, 2]
        assert len(checks) == 1  # the second step's: the first had nothing to find
        assert not steplog.starting(handle.get_workflow_id())  # forgotten at that check
    finally:
        await shutdown_async()


async def test_another_execution_of_a_run_inserted_here_reads_its_log(log_url: str) -> None:
    """Known by the token its insert carried: a check from any other execution (here, from
    outside the run, as a recovery's replay reads it) reads the log and finds the step."""
    calls.clear()
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    try:
        sys_db = _sys_db()
        wid = await _twice_run()
        steplog._mark_fresh(wid, "the-first-execution")
        logged = sys_db.check_operation_execution(wid, 1, "steplog.add")
        assert logged is not None and logged["error"] is None  # read, not assumed empty
        assert not steplog.starting(wid)
    finally:
        await shutdown_async()


def test_runs_remembered_as_just_inserted_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(steplog, "_fresh", {})
    for n in range(steplog.MAX_FRESH + 10):
        steplog._mark_fresh(f"run-{n}", "token")
    assert len(steplog._fresh) == steplog.MAX_FRESH
    assert not steplog.starting("run-0") and steplog.starting(f"run-{steplog.MAX_FRESH + 9}")
