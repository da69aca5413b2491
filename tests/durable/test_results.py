"""A wait for the result of a workflow this process runs ends once its outcome is
written, not at the caller's next poll (a minute here), from async and plain code alike;
a wait begun while it runs here reads nothing on SQLite (the write hands over its row),
and one begun once its outcome landed reads at once; a workflow that does not run here
is still polled as asked; a DBOS whose wait changed is refused by name."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from dbos import DBOS, SetWorkflowID

from tether.durable import DurableConfig, launch, results, shutdown_async
from tether.errors import ConfigError

LONG_POLL = 60.0
"""A polling interval longer than any of these tests may take."""


@DBOS.workflow(name="results.later")
async def later(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


async def test_a_local_workflows_result_comes_when_written_not_at_the_next_poll(
    log_url: str,
) -> None:
    launch(DurableConfig(log_url, polling_interval_seconds=LONG_POLL))
    try:
        with SetWorkflowID("results-a"):
            await DBOS.start_workflow_async(later, 0.3)
        with SetWorkflowID("results-b"):
            await DBOS.start_workflow_async(later, 0.3)
        started = time.monotonic()
        handle = await DBOS.retrieve_workflow_async("results-a")
        assert await handle.get_result(polling_interval_sec=LONG_POLL) == "done"

        def plain_wait() -> object:
            return DBOS.retrieve_workflow("results-b").get_result(polling_interval_sec=LONG_POLL)

        assert await asyncio.to_thread(plain_wait) == "done"
        assert time.monotonic() - started < LONG_POLL / 4
    finally:
        await shutdown_async()


async def test_a_workflow_that_does_not_run_here_is_polled_as_asked(log_url: str) -> None:
    from sqlalchemy import event

    launch(DurableConfig(log_url))
    try:
        sys_db: Any = _sys_db()
        reads: list[str] = []

        def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if "workflow_status" in statement:
                reads.append(statement)

        event.listen(sys_db.engine, "before_cursor_execute", note)
        with pytest.raises(TimeoutError):  # nothing of that id runs, or ever will
            await asyncio.wait_for(sys_db.await_workflow_result_async("nowhere", 0.02), 0.5)
        event.remove(sys_db.engine, "before_cursor_execute", note)
        assert len(reads) >= 5  # read every 0.02 s, as asked
    finally:
        await shutdown_async()


_RESULT_READ = "SELECT __dbos_placeholder_schema__.workflow_status.status, coalesce("
"""How the read of a workflow's result begins (DBOS's statement and the one built once)."""


@DBOS.workflow(name="results.fails")
async def fails(seconds: float = 0.0) -> str:
    await asyncio.sleep(seconds)
    raise ValueError("no refund for you")


async def test_each_read_of_a_result_uses_one_statement_built_once(log_url: str) -> None:
    from sqlalchemy import event

    launch(DurableConfig(log_url))
    try:
        sys_db: Any = _sys_db()
        with SetWorkflowID("results-once"):
            await DBOS.start_workflow_async(later, 0.0)
        with SetWorkflowID("results-fails"):
            await DBOS.start_workflow_async(fails)
        for done in ("results-once", "results-fails"):  # each read below reads the log
            status = await DBOS.get_workflow_status_async(done)
            while status is not None and status.status == "PENDING":
                await asyncio.sleep(0.01)
                status = await DBOS.get_workflow_status_async(done)
        statements: list[object] = []

        def note(conn: Any, clause: object, *args: Any) -> None:
            if str(clause).startswith(_RESULT_READ):
                statements.append(clause)

        event.listen(sys_db.engine, "before_execute", note)
        for _ in range(3):
            handle = await DBOS.retrieve_workflow_async("results-once")
            assert await handle.get_result() == "done"
            failing = await DBOS.retrieve_workflow_async("results-fails")
            with pytest.raises(ValueError, match="no refund for you"):
                await failing.get_result()
        event.remove(sys_db.engine, "before_execute", note)
        assert len(statements) >= 6
        assert len({id(s) for s in statements}) == 1  # the same statement, every read
    finally:
        await shutdown_async()


async def test_a_wake_from_the_waiters_loop_skips_its_pipe_and_one_from_elsewhere_uses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    piped: list[object] = []
    threadsafe = loop.call_soon_threadsafe

    def noting(callback, *args):  # type: ignore[no-untyped-def]
        if callback is results._settle:  # a wake (the thread's own result is piped too)
            piped.append(callback)
        return threadsafe(callback, *args)

    monkeypatch.setattr(loop, "call_soon_threadsafe", noting)
    here: asyncio.Future[results.Row | None] = loop.create_future()
    results._wake_on(loop, here, None)
    await asyncio.wait_for(here, 1.0)
    assert piped == []  # woken on its own loop: no write to the loop's self-pipe
    there: asyncio.Future[results.Row | None] = loop.create_future()
    await asyncio.to_thread(results._wake_on, loop, there, None)
    await asyncio.wait_for(there, 1.0)
    assert len(piped) == 1  # from another thread: through the pipe, as before


def test_a_dbos_whose_result_read_changed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    class Log:
        sharded = False

    monkeypatch.setattr(results, "_READ_DIGEST", "0" * 16)
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        results.install(Log(), object())


def test_a_dbos_whose_wait_changed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "_EXPECTED_DIGEST", "0" * 16)
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        results.install(object(), object())


def _sys_db() -> object:
    from dbos import _dbos

    return _dbos._dbos_global_instance._sys_db  # type: ignore[union-attr]


def _active() -> object:
    from dbos import _dbos

    return _dbos._dbos_global_instance._active_workflows_set  # type: ignore[union-attr]


async def test_a_wait_begun_while_the_run_is_here_reads_nothing_on_sqlite(log_url: str) -> None:
    from sqlalchemy import event

    launch(DurableConfig(log_url, polling_interval_seconds=LONG_POLL))
    try:
        sys_db: Any = _sys_db()
        reads: list[str] = []

        def note(conn: Any, cursor: Any, statement: str, params: Any, *args: Any) -> None:
            if "workflow_output" in statement and statement.lstrip().startswith("SELECT"):
                reads.append(str(params))

        event.listen(sys_db.engine, "before_cursor_execute", note)
        try:
            with SetWorkflowID("results-here"):
                await DBOS.start_workflow_async(later, 0.2)
            with SetWorkflowID("results-here-fails"):
                await DBOS.start_workflow_async(fails, 0.2)
            handle = await DBOS.retrieve_workflow_async("results-here", existing_workflow=False)
            waiter = asyncio.create_task(
                sys_db.await_workflow_result_async("results-here-fails", LONG_POLL)
            )
            assert await handle.get_result(polling_interval_sec=LONG_POLL) == "done"
            with pytest.raises(ValueError, match="no refund for you"):
                await waiter
        finally:
            event.remove(sys_db.engine, "before_cursor_execute", note)
        if log_url.startswith("sqlite"):
            assert reads == []  # each waiter was handed the row its outcome's write wrote
        else:  # PostgreSQL's outcome is DBOS's statement: woken, each waiter reads its row
            assert len(reads) == 2

        def plain_wait() -> object:
            return sys_db.await_workflow_result("results-here-fails", LONG_POLL)

        with pytest.raises(ValueError, match="no refund for you"):  # landed: read at once
            await asyncio.wait_for(asyncio.to_thread(plain_wait), LONG_POLL / 4)
    finally:
        await shutdown_async()


async def test_a_wait_begun_after_the_outcome_landed_reads_it_though_the_run_is_still_here(
    log_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outcome is written before DBOS forgets the run as one in progress here: a wait
    begun in between must read the log, not sleep until the once-a-minute recheck."""
    monkeypatch.setattr(results, "LOCAL_RECHECK_SECONDS", LONG_POLL)
    launch(DurableConfig(log_url, polling_interval_seconds=LONG_POLL))
    answered: list[object] = []
    try:
        sys_db: Any = _sys_db()
        real_wake = results.wake

        def wake_then_wait(workflow_id: str, row: Any = None) -> None:
            real_wake(workflow_id, row)
            if workflow_id != "results-landed":
                return
            # still inside the outcome's write, on the workflows' loop: the run is here
            waiter = threading.Thread(
                target=lambda: answered.append(sys_db.await_workflow_result(workflow_id, 0.01))
            )
            waiter.start()
            waiter.join(LONG_POLL / 4)

        monkeypatch.setattr(results, "wake", wake_then_wait)
        with SetWorkflowID("results-landed"):
            handle = await DBOS.start_workflow_async(later, 0.0)
        assert await handle.get_result() == "done"
        assert answered == ["done"]  # read at once, not after the recheck's minute
    finally:
        await shutdown_async()
