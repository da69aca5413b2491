"""DBOS's async stages: the no-op stage and the log's stages never take a thread (or one
each when asked to), a step's own body is never moved off its thread, and a DBOS whose
stages changed is refused by name."""

from __future__ import annotations

import asyncio
import threading

import pytest
from dbos import DBOS, _outcome

from tether.durable import DurableConfig, hops, launch, shutdown_async
from tether.errors import ConfigError

threads: dict[str, set[str]] = {}


def _note(what: str) -> None:
    threads.setdefault(what, set()).add(threading.current_thread().name)


@DBOS.workflow(name="hops.flow")
async def flow(n: int) -> int:
    async def add(k: int) -> int:
        _note("async step")
        return k + 1

    def blocking(k: int) -> int:
        _note("sync step")
        return k * 2

    first = await DBOS.run_step_async({"name": "hops.add"}, add, n)
    return await DBOS.run_step_async({"name": "hops.blocking"}, blocking, first)


@pytest.mark.parametrize("on_loop", [None, True, False])
async def test_the_log_stages_run_where_the_configuration_says(
    log_url: str, on_loop: bool | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    hopped: list[str] = []
    real = asyncio.to_thread

    async def counting(func, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        hopped.append(getattr(func, "__qualname__", repr(func)))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counting)
    threads.clear()
    launch(DurableConfig(log_url, polling_interval_seconds=0.05, log_on_loop=on_loop))
    try:
        assert _outcome.asyncio is hops._PROXY
        handle = await DBOS.start_workflow_async(flow, 1)
        assert await handle.get_result() == 4
        steps = await DBOS.list_workflow_steps_async(handle.get_workflow_id())
        assert [s["function_name"] for s in steps] == ["hops.add", "hops.blocking"]
    finally:
        await shutdown_async()
    here = threading.current_thread().name
    assert threads["async step"] == {here}  # the step's body on the workflow's loop
    assert here not in threads["sync step"]  # a blocking body still gets its thread
    assert hops.NO_OP_STAGE not in hopped
    # by default on the loop on SQLite, in threads on PostgreSQL
    inline = log_url.startswith("sqlite:") if on_loop is None else on_loop
    # else the async step's check and record, and the workflow's outcome, each a hop
    expected = [] if inline else sorted(hops.LOG_STAGES)
    assert sorted(name for name in hopped if name in hops.LOG_STAGES) == expected


def test_a_dbos_whose_stages_changed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    hops.install(inline_log=True)  # the pinned DBOS: its stages are the ones named
    monkeypatch.setattr(hops, "_EXPECTED_DIGEST", "0" * 16)
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        hops.install(inline_log=True)
