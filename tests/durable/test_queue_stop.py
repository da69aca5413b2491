"""A stop while a queue's claim is in flight: the claimed run is handed to the workflows'
loop before that loop stops (it then finishes, or stays pending and resumes at the next
launch), never dropped on a stopped loop with DBOS's "Error executing workflow" and a
coroutine never awaited; a stop called on the workflows' own loop does not wait for a
claim that would wait for it; a DBOS whose queue threads or stop changed is refused."""

from __future__ import annotations

import gc
import logging
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS, _dbos
from holding import hold, reset

from tether.durable import DurableConfig, launch, queue_stop, shutdown
from tether.errors import ConfigError


def _hold_claims(claimed: threading.Event, go_on: threading.Event) -> None:
    """Make this DBOS's queue threads stop right after a claim that took a run, until
    ``go_on`` (the claim is committed: the run is this executor's, not started yet)."""
    sys_db: Any = _dbos._dbos_global_instance._sys_db_field  # type: ignore[union-attr]
    real = sys_db.start_queued_workflows

    def held(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        if found[0]:
            claimed.set()
            go_on.wait(30)
        return found

    sys_db.start_queued_workflows = held


def test_a_run_claimed_while_dbos_stops_starts_before_its_loop_stops(
    log_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="dbos")
    reset()
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    claimed, go_on = threading.Event(), threading.Event()
    try:
        _hold_claims(claimed, go_on)
        queue = DBOS.register_queue("stopq", polling_interval_sec=0.05)
        handle = queue.enqueue(hold, "k", 0.0)
        assert claimed.wait(30)
    except BaseException:
        go_on.set()
        shutdown()
        raise
    stopper = threading.Thread(target=shutdown)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stopper.start()
        time.sleep(0.3)  # the stop is under way: DBOS's own would stop the loop now
        go_on.set()
        stopper.join(60)
        gc.collect()  # a coroutine dropped unawaited warns when it is collected
    assert not stopper.is_alive()
    assert not any("Error executing workflow" in r.getMessage() for r in caplog.records)
    assert not [w for w in caught if "never awaited" in str(w.message)]
    # nothing lost either way: finished, or pending and resumed by the next launch
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    try:
        assert DBOS.retrieve_workflow(handle.get_workflow_id()).get_result() == "k"
    finally:
        shutdown()


async def test_a_stop_on_the_workflows_own_loop_does_not_wait_for_the_queue(
    tmp_path: Path,
) -> None:
    launch(DurableConfig(f"sqlite:///{tmp_path / 'runs.sqlite'}", polling_interval_seconds=0.05))
    instance: Any = _dbos._dbos_global_instance
    try:
        # a claim in flight would hand its run to this very loop, blocked in the stop
        assert queue_stop.settle(instance) is False
        assert not any(e.is_set() for e in instance.background_thread_stop_events)
    finally:
        shutdown()


def test_a_dbos_whose_queue_threads_or_stop_changed_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue_stop._source_digest.cache_clear()
    monkeypatch.setattr(queue_stop, "_EXPECTED_DIGEST", "0" * 16)
    try:
        with pytest.raises(ConfigError, match="DBOS"):
            queue_stop.verify()
    finally:
        queue_stop._source_digest.cache_clear()
