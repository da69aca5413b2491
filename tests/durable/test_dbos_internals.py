"""The private DBOS state tether reads (for want of a public API) is still where the
pinned DBOS keeps it: a DBOS upgrade that moves any of it fails here, by name."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from dbos import DBOS, _dbos

from tether.durable import DurableConfig, launch, running_workflow_ids, shutdown_async
from tether.durable.runtime import dbos_internals, is_launched
from tether.errors import ConfigError

entered = asyncio.Event()


@DBOS.workflow()
async def wait_forever() -> str:
    entered.set()
    await asyncio.Event().wait()
    return "never"


async def test_the_state_tether_reads_is_where_dbos_keeps_it(tmp_path: Path) -> None:
    assert dbos_internals() is None and not is_launched()
    launch(DurableConfig(f"sqlite:///{tmp_path / 'runs.sqlite'}", polling_interval_seconds=0.05))
    try:
        dbos = dbos_internals()
        assert dbos is not None and dbos.launched and is_launched()
        assert dbos.stop_events and all(isinstance(e, threading.Event) for e in dbos.stop_events)
        handle = await DBOS.start_workflow_async(wait_forever)
        await asyncio.wait_for(entered.wait(), 30)
        dbos = dbos_internals()
        assert dbos is not None
        here = [t for t in dbos.workflow_tasks if t.get_loop() is asyncio.get_running_loop()]
        assert len(here) == 1 and not here[0].done()  # the run's task, which a stop cancels
        assert handle.get_workflow_id() in running_workflow_ids()
    finally:
        await shutdown_async()
    assert here[0].cancelled()
    assert dbos_internals() is None and running_workflow_ids() == set()
    assert all(e.is_set() for e in dbos.stop_events)


def test_a_dbos_without_that_state_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    class Renamed:
        _launched = True  # the rest moved

    monkeypatch.setattr(_dbos, "_dbos_global_instance", Renamed())
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        dbos_internals()
