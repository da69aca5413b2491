"""A run this process enqueues starts in the enqueuer's thread while a place is free, with
no look of the queue's thread (the queues here are polled once a minute and their doorbell
is silenced); it never runs more than its places, a run left waiting for a place starts
once one frees, and a DBOS whose queue dispatch changed is refused by name. Written
already claimed (:func:`handoff.enqueue_now`), a run needs no claim at all; with no place
free, or runs possibly waiting, it is only enqueued; delivered twice it runs once; and a
process stopped between its write and its start resumes it at the next launch."""

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


@pytest.mark.parametrize("digest", ["_EXPECTED_DIGEST", "_INSERT_DIGEST"])
def test_a_dbos_whose_queue_dispatch_or_enqueue_changed_is_refused(
    monkeypatch: pytest.MonkeyPatch, digest: str
) -> None:
    handoff._verify.cache_clear()
    monkeypatch.setattr(handoff, digest, "0" * 16)
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


def _claims(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The queue names of every claim made on DBOS's log from now on."""
    from dbos._dbos import _get_dbos_instance

    sys_db: Any = _get_dbos_instance()._sys_db
    made: list[str] = []
    claim = sys_db.start_queued_workflows

    def noting(queue: Any, *args: Any, **kwargs: Any) -> Any:
        if queue.name != "_dbos_internal_queue":  # DBOS's own queue, looked at by its thread
            made.append(queue.name)
        return claim(queue, *args, **kwargs)

    monkeypatch.setattr(sys_db, "start_queued_workflows", noting)
    return made


async def test_a_run_written_claimed_starts_at_once_and_needs_no_claim(
    log_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reset()
    queue = f"hc-{uuid.uuid4().hex[:8]}"
    client = await _started(queue, 1, log_url)
    monkeypatch.setattr(dispatch.Doorbell, "ring", lambda self: None)  # never woken
    claims = _claims(monkeypatch)
    try:
        options: Any = {"queue_name": queue, "workflow_name": HOLD, **_version()}
        started = time.monotonic()
        handoff.enqueue_now(client, options, "c", 0.3)
        (status,) = await client.list_workflows_async(queue_name=queue)
        from dbos._utils import GlobalParams

        assert status.status in ("PENDING", "SUCCESS")  # never ENQUEUED: written claimed
        assert status.executor_id == GlobalParams.executor_id
        assert status.app_version == GlobalParams.app_version
        handle = await DBOS.retrieve_workflow_async(str(status.workflow_id))
        assert await handle.get_result() == "c"
        assert claims == []  # no claim, by this thread or the queue's
        assert time.monotonic() - started < LONG_POLL / 4
    finally:
        await asyncio.to_thread(client.destroy)
        await shutdown_async()


async def test_with_no_place_free_or_runs_possibly_waiting_a_run_is_only_enqueued(
    log_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    reset()
    queue = f"hf-{uuid.uuid4().hex[:8]}"
    client = await _started(queue, 1, log_url)
    elsewhere = await asyncio.to_thread(
        DBOSClient, system_database_url=f"sqlite:///{tmp_path / 'other.sqlite'}"
    )
    try:
        options: Any = {"queue_name": queue, "workflow_name": HOLD, **_version()}
        assert not handoff.enqueue_claimed(elsewhere, options, "other log", 0.0)
        bell = dispatch.bell_of(queue)
        assert bell is not None
        with monkeypatch.context() as m:  # the queue's thread, idle, stays so meanwhile
            m.setattr(dispatch.Doorbell, "ring", lambda self: None)
            m.setattr(bell, "backlog", True)  # as after a look that filled every place
            assert not handoff.enqueue_claimed(client, options, "early", 0.0)
        assert await client.list_workflows_async(queue_name=queue) == []  # nothing written
        assert handoff.enqueue_claimed(client, options, "first", 0.3)
        assert not handoff.enqueue_claimed(client, options, "second", 0.1)  # its place taken
        assert len(await client.list_workflows_async(queue_name=queue)) == 1  # nothing written
        handoff.enqueue_now(client, options, "second", 0.1)  # enqueued, waits for the place
        statuses = {w.status for w in await client.list_workflows_async(queue_name=queue)}
        assert statuses == {"PENDING", "ENQUEUED"}
        done = [
            await (await DBOS.retrieve_workflow_async(w.workflow_id)).get_result()
            for w in await client.list_workflows_async(queue_name=queue)
        ]
        assert sorted(done) == ["first", "second"] and most[0] == 1
    finally:
        await asyncio.to_thread(elsewhere.destroy)
        await asyncio.to_thread(client.destroy)
        await shutdown_async()


async def test_a_run_delivered_twice_runs_once(log_url: str) -> None:
    reset()
    queue = f"ht-{uuid.uuid4().hex[:8]}"
    client = await _started(queue, 2, log_url)
    try:
        options: Any = {
            "queue_name": queue,
            "workflow_name": HOLD,
            "workflow_id": f"twice-{queue}",
            **_version(),
        }
        handoff.enqueue_now(client, options, "once", 0.2)
        assert not handoff.enqueue_claimed(client, options, "once", 0.2)  # in the log already
        handoff.enqueue_now(client, options, "once", 0.2)
        handle = await DBOS.retrieve_workflow_async(f"twice-{queue}")
        assert await handle.get_result() == "once"
        assert most[0] == 1  # one execution, never two at once
        assert len(await client.list_workflows_async(queue_name=queue)) == 1
    finally:
        await asyncio.to_thread(client.destroy)
        await shutdown_async()


async def test_a_run_written_claimed_but_never_started_resumes_at_the_next_launch(
    log_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a process killed between the write and the start leaves it: pending for this
    executor, which recovers it at its next launch."""
    reset()
    queue = f"hk-{uuid.uuid4().hex[:8]}"
    client = await _started(queue, 1, log_url)
    workflow_id = f"stranded-{queue}"
    try:
        options: Any = {
            "queue_name": queue,
            "workflow_name": HOLD,
            "workflow_id": workflow_id,
            **_version(),
        }
        with monkeypatch.context() as m:
            m.setattr(handoff, "_start", lambda *args: None)  # the process dies here
            assert handoff.enqueue_claimed(client, options, "recovered", 0.0)
        status = await DBOS.get_workflow_status_async(workflow_id)
        assert status is not None and status.status == "PENDING"
        await shutdown_async()
        await _started(queue, 1, log_url)
        handle = await DBOS.retrieve_workflow_async(workflow_id)
        assert await asyncio.wait_for(handle.get_result(), LONG_POLL / 4) == "recovered"
    finally:
        await asyncio.to_thread(client.destroy)
        if is_launched():
            await shutdown_async()
