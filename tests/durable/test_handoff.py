"""A run this process enqueues starts in the enqueuer's thread while a place is free, with
no look of the queue's thread (the queues here are polled once a minute and their doorbell
is silenced); it never runs more than its places, a run left waiting for a place starts
once one frees, and a DBOS whose queue dispatch changed is refused by name."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS, DBOSClient
from holding import HOLD, LONG_POLL, most, reset

from tether.durable import (
    DurableConfig,
    dispatch,
    handoff,
    is_launched,
    launch,
    shutdown_async,
    tune_client,
)
from tether.errors import ConfigError


async def _started(queue: str, places: int, log_url: str) -> DBOSClient:
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    await DBOS.register_queue_async(
        queue, worker_concurrency=places, polling_interval_sec=LONG_POLL
    )
    deadline = time.monotonic() + 10
    while (bell := dispatch.bell_of(queue)) is None or bell.empty_since is None:
        assert time.monotonic() < deadline  # the queue's thread, its first look done
        await asyncio.sleep(0.02)
    client = await asyncio.to_thread(DBOSClient, system_database_url=log_url)
    tune_client(client)
    return client


async def test_a_run_enqueued_here_starts_at_once_without_the_queue_thread(
    log_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reset()
    queue = f"hq-{uuid.uuid4().hex[:8]}"  # a thread of a DBOS stopped before may linger
    client = await _started(queue, 1, log_url)
    monkeypatch.setattr(dispatch.Doorbell, "ring", lambda self: None)  # never woken
    try:
        options: Any = {"queue_name": queue, "workflow_name": HOLD, **_version()}
        started = time.monotonic()
        handoff.enqueue_and_start(queue, lambda: client.enqueue(options, "a", 0.3))
        (status,) = await client.list_workflows_async(queue_name=queue)
        workflow_id = str(status.workflow_id)
        assert workflow_id in _active()  # claimed here, handed to the loop
        handle = await DBOS.retrieve_workflow_async(workflow_id)
        assert await handle.get_result() == "a"
        assert time.monotonic() - started < LONG_POLL / 4
    finally:
        await asyncio.to_thread(client.destroy)
        await shutdown_async()


async def test_runs_started_here_keep_to_the_places_and_wait_for_one_to_free(
    log_url: str,
) -> None:
    reset()
    queue = f"hp-{uuid.uuid4().hex[:8]}"
    client = await _started(queue, 2, log_url)
    try:
        options: Any = {"queue_name": queue, "workflow_name": HOLD, **_version()}
        started = time.monotonic()
        for i in range(5):
            handoff.enqueue_and_start(queue, lambda i=i: client.enqueue(options, f"r{i}", 0.2))
        assert len(_active()) <= 2
        ids = [w.workflow_id for w in await client.list_workflows_async(queue_name=queue)]
        done = [await (await DBOS.retrieve_workflow_async(w)).get_result() for w in ids]
        assert sorted(done) == [f"r{i}" for i in range(5)]
        assert most[0] == 2  # never more at once than the worker's places
        assert time.monotonic() - started < LONG_POLL / 4  # a freed place was taken at once
    finally:
        await asyncio.to_thread(client.destroy)
        await shutdown_async()


async def test_no_queue_thread_here_means_no_start() -> None:
    assert handoff.start_next("no-such-queue") is None


def test_a_dbos_whose_queue_dispatch_changed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    handoff._verify.cache_clear()
    monkeypatch.setattr(handoff, "_EXPECTED_DIGEST", "0" * 16)
    try:
        with pytest.raises(ConfigError, match="does not know this DBOS"):
            handoff._verify()
    finally:
        handoff._verify.cache_clear()


def test_a_changed_queue_dispatch_is_refused_at_launch_not_at_the_first_delivery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handoff._verify.cache_clear()
    monkeypatch.setattr(handoff, "_EXPECTED_DIGEST", "0" * 16)
    try:
        with pytest.raises(ConfigError, match="does not know this DBOS"):
            launch(DurableConfig(f"sqlite:///{tmp_path / 'runs.sqlite'}"))
        assert not is_launched()
    finally:
        handoff._verify.cache_clear()


def _version() -> dict[str, str]:
    """This worker's application version (runs of no version are left to its thread)."""
    from dbos._utils import GlobalParams

    return {"app_version": GlobalParams.app_version}


def _active() -> list[str]:
    from dbos import _dbos

    instance: Any = _dbos._dbos_global_instance
    return [*instance._active_workflows_set.activeList(), *_claimed()]


def _claimed() -> list[str]:
    return [k for bell in dispatch._BELLS.values() for k in bell.claimed]
