"""Starting a workflow and awaiting its handle: on a SQLite log the status insert and the
status reads take no thread (on PostgreSQL they still do), a result awaited outside a
workflow never sends its no-op note to a thread, the run's row is in the log once the
start returns, and a DBOS whose start changed is refused by name."""

from __future__ import annotations

import asyncio

import pytest
from dbos import DBOS, SetWorkflowID, _core

from tether.durable import DurableConfig, launch, shutdown_async, starts
from tether.errors import ConfigError


@DBOS.workflow(name="starts.double")
async def double(n: int) -> int:
    me = await DBOS.get_workflow_status_async("starts-a")  # a step of this workflow
    assert me is not None and me.status == "PENDING"
    return await DBOS.run_step_async({"name": "starts.step"}, _twice, n)


async def _twice(n: int) -> int:
    return n * 2


async def test_a_start_and_its_result_hop_only_where_the_database_needs_it(
    log_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hopped: list[str] = []
    real = asyncio.to_thread

    async def counting(func, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        name = getattr(func, "__name__", repr(func))
        hopped.append(f"{name}:{args[1]}" if name == "call_function_as_step" else name)
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counting)
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    try:
        assert isinstance(_core.asyncio, starts._Asyncio)
        with SetWorkflowID("starts-a"):
            handle = await DBOS.start_workflow_async(double, 21)
        status = await DBOS.get_workflow_status_async("starts-a")
        assert status is not None  # the row is written before the start returns
        assert await handle.get_result() == 42
        again = await DBOS.retrieve_workflow_async("starts-a")
        assert await again.get_result() == 42
        steps = await DBOS.list_workflow_steps_async("starts-a")
        assert [s["function_name"] for s in steps] == ["DBOS.getStatus", "starts.step"]
    finally:
        await shutdown_async()
    assert starts.GET_RESULT_NOTE not in hopped  # outside a workflow: a no-op, no thread
    sqlite = log_url.startswith("sqlite:")
    assert hopped.count(starts.STATUS_INSERT) == (0 if sqlite else 1)
    status_reads = hopped.count(f"call_function_as_step:{starts.STATUS_READ}")
    # three: the workflow's own, this test's, the retrieve's
    assert status_reads == (0 if sqlite else 3)


def test_a_dbos_whose_start_changed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    starts.install(sqlite_log=True)  # the pinned DBOS: its start is the one reproduced
    monkeypatch.setattr(starts, "_EXPECTED_DIGEST", "0" * 16)
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        starts.install(sqlite_log=True)


async def test_another_routing_of_the_same_hops_is_kept_beneath(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dbos import _dbos

    passed: list[str] = []

    class Routing:  # as another tether module would route a DBOS module's hops
        def __getattr__(self, name: str) -> object:
            return getattr(asyncio, name)

        async def to_thread(self, func, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            passed.append(func.__name__)
            return await asyncio.to_thread(func, *args, **kwargs)

    Routing.__module__ = "tether.durable.elsewhere"
    monkeypatch.setattr(_core, "asyncio", Routing())
    monkeypatch.setattr(_dbos, "asyncio", asyncio)
    starts.install(sqlite_log=True)
    assert isinstance(_core.asyncio, starts._Asyncio)

    def elsewhere() -> str:
        return "hopped"

    assert await _core.asyncio.to_thread(elsewhere) == "hopped"
    assert passed == ["elsewhere"]  # not inlined here: left to the routing beneath
    assert _core.asyncio.get_running_loop() is asyncio.get_running_loop()


def test_an_unknown_asyncio_in_dbos_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_core, "asyncio", object())
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        starts.install(sqlite_log=True)
