"""A queue thread looks at its queue when this process enqueues to it and when one of its
places frees while runs may wait, not at its next poll (the poll interval here is a
minute); it never runs more than its places; it waits longer while its queue stays empty,
stops at once, and a DBOS whose queue dispatch changed is refused by name."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from dbos import DBOS, DBOSClient
from holding import HOLD, LONG_POLL, hold, most, reset, running

from tether.durable import DurableConfig, dispatch, launch, shutdown_async, tune_client
from tether.errors import ConfigError


async def test_enqueues_and_freed_places_are_taken_at_once(log_url: str) -> None:
    reset()
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    client = None
    try:
        queue = await DBOS.register_queue_async(
            "dq", worker_concurrency=2, polling_interval_sec=LONG_POLL
        )
        await _until(lambda: "dq" in dispatch._BELLS)
        await asyncio.sleep(0.2)  # its first look, at start, found nothing
        started = time.monotonic()
        # one place each: the third waits for a place to free, the rest come later
        handles = [await queue.enqueue_async(hold, f"w{i}", 0.2) for i in range(3)]
        client = await asyncio.to_thread(DBOSClient, system_database_url=log_url)
        tune_client(client)  # its enqueues ring too
        options: Any = {"queue_name": "dq", "workflow_name": HOLD}
        handles.append(await client.enqueue_async(options, "c0", 0.2))
        handles.append(await client.enqueue_async(options, "c1", 0.2))
        done = [await h.get_result() for h in handles]
        assert done == ["w0", "w1", "w2", "c0", "c1"]
        assert time.monotonic() - started < LONG_POLL / 2  # no run waited for a poll
        assert most[0] == 2  # and never more at once than the worker's places
    finally:
        if client is not None:
            await asyncio.to_thread(client.destroy)
        await shutdown_async()
    assert "dq" not in dispatch._BELLS  # the thread stopped with DBOS


async def _until(check: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)


class Places:
    """DBOS's running-run registry as a doorbell reads it."""

    def __init__(self) -> None:
        self.running = 0

    def count_for_queue(self, name: str) -> int:
        return self.running


class FakeDBOS:
    def __init__(self) -> None:
        self._active_workflows_set = Places()


class FakeQueue:
    name = "q"
    _worker_concurrency = 2


def test_an_empty_queue_is_looked_at_less_and_less_and_a_full_one_not_at_all() -> None:
    dbos = FakeDBOS()
    bell = dispatch.Doorbell(threading.Event(), dbos, FakeQueue())
    assert bell.interval(0.1) == 0.1
    waits = []
    for empty_for in (0.1, 1.0, 2.0, 3.0, 60.0):
        bell.empty_since = time.monotonic() - empty_for
        waits.append(bell.interval(0.1))
    assert waits == sorted(waits) and waits[0] == 0.1 and 0.2 < waits[2] < 1.0
    assert waits[-1] == dispatch.IDLE_SECONDS
    assert bell.interval(5.0) == 5.0  # never shorter than the queue's own interval
    bell.empty_since = None
    dbos._active_workflows_set.running = 2
    assert bell.interval(0.1) == dispatch.FULL_SECONDS
    dbos._active_workflows_set.running = 1
    assert bell.interval(0.1) == 0.1


def test_a_claimed_run_holds_a_place_until_it_registers_or_is_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bell = dispatch.Doorbell(threading.Event(), FakeDBOS(), FakeQueue())
    bell.claimed.update({"a": time.monotonic(), "b": time.monotonic() - 60})
    assert bell.unregistered() == 1 and list(bell.claimed) == ["a"]


def test_a_ring_or_a_stop_ends_the_wait_at_once() -> None:
    stop = threading.Event()
    bell = dispatch.Doorbell(stop, FakeDBOS(), FakeQueue())
    assert bell.wait(LONG_POLL) is False  # a new thread looks at once
    dispatch._ring_on_stop(stop, bell)
    woke: list[bool] = []

    def waiting() -> None:
        woke.append(bell.wait(LONG_POLL))
        woke.append(bell.wait(LONG_POLL))

    t = threading.Thread(target=waiting)
    t.start()
    dispatch._BELLS["q"] = bell
    try:
        time.sleep(0.05)
        dispatch.ring("q")
        deadline = time.monotonic() + LONG_POLL / 4
        while not woke and time.monotonic() < deadline:
            time.sleep(0.01)
        stop.set()
        t.join(LONG_POLL / 4)
    finally:
        del dispatch._BELLS["q"]
    assert not t.is_alive() and woke == [False, True]


def test_a_dbos_whose_queue_dispatch_changed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from dbos import _queue

    monkeypatch.setattr(_queue, "queue_worker_thread", _queue.queue_worker_thread)
    monkeypatch.setattr(dispatch, "_EXPECTED_DIGEST", "0" * 16)
    if _queue.queue_worker_thread is dispatch._worker:  # installed by a launch: undo it
        monkeypatch.setattr(_queue, "queue_worker_thread", dispatch.dbos_queue_worker())
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        dispatch.install()


async def test_a_run_that_ends_wakes_the_thread_only_when_runs_may_wait(
    log_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reset()
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    try:
        queue = await DBOS.register_queue_async(
            "dr", worker_concurrency=2, polling_interval_sec=LONG_POLL
        )
        await _until(lambda: "dr" in dispatch._BELLS)
        await _until(lambda: dispatch._BELLS["dr"].empty_since is not None)  # first look
        first = await queue.enqueue_async(hold, "alone", 0.2)  # a place left: none waits
        await _until(lambda: "alone" in running)
        rung: list[str] = []
        monkeypatch.setattr(dispatch.Doorbell, "ring", lambda self: rung.append("end"))
        assert await first.get_result() == "alone"
        await asyncio.sleep(0.1)
        assert rung == []  # its end woke no look: the queue was found empty
        monkeypatch.undo()
        started = time.monotonic()
        handles = [await queue.enqueue_async(hold, f"f{i}", 0.2) for i in range(3)]
        assert [await h.get_result() for h in handles] == ["f0", "f1", "f2"]
        assert time.monotonic() - started < LONG_POLL / 4  # the third took a freed place
    finally:
        await shutdown_async()
