"""On PostgreSQL a run queued by another process wakes the worker at once (its queue is
polled once a minute here): the database notifies each queued run once, by its queue's
name, never for a claim; the worker listens only while DBOS runs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest
from dbos import DBOS, DBOSClient

from tether.durable import DurableConfig, dispatch, launch, shutdown_async, wakeup

LONG_POLL = 60.0
"""A queue's polling interval longer than the test may take."""


@DBOS.workflow(name="wakeup.echo")
async def echo(value: str) -> str:
    return value


async def _until(check: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)


async def test_a_run_queued_by_another_process_is_taken_at_once(pg_url: str) -> None:
    launch(DurableConfig(pg_url))
    client = None
    try:
        await DBOS.register_queue_async("wq", polling_interval_sec=LONG_POLL)
        await _until(lambda: "wq" in dispatch._BELLS and dispatch._listened.is_set())
        await asyncio.sleep(0.3)  # its first look, at start, found nothing
        with psycopg.connect(pg_url, autocommit=True) as watcher:
            watcher.execute(f"LISTEN {wakeup.CHANNEL}")
            # a client of its own, as another process's: its enqueue rings no doorbell here
            client = await asyncio.to_thread(DBOSClient, system_database_url=pg_url)
            options: Any = {"queue_name": "wq", "workflow_name": "wakeup.echo"}
            started = time.monotonic()
            handle = await client.enqueue_async(options, "hello")
            assert await asyncio.wait_for(handle.get_result(), LONG_POLL / 4) == "hello"
            assert time.monotonic() - started < LONG_POLL / 4  # not at the next poll
            await asyncio.sleep(0.3)
            notes = [n.payload for n in watcher.notifies(timeout=0.5)]
        assert notes == ["wq"]  # the enqueue, not the claim nor the end
    finally:
        if client is not None:
            await asyncio.to_thread(client.destroy)
        await shutdown_async()
    assert not dispatch._listened.is_set()  # stopped with DBOS: the queues poll again
    assert wakeup._listener is None


async def test_a_lost_listening_connection_is_made_again(pg_url: str) -> None:
    launch(DurableConfig(pg_url))
    client = None
    try:
        await DBOS.register_queue_async("wq2", polling_interval_sec=LONG_POLL)
        await _until(lambda: "wq2" in dispatch._BELLS and dispatch._listened.is_set())
        with psycopg.connect(pg_url, autocommit=True) as admin:
            cut = admin.execute(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                " WHERE query = %s AND pid <> pg_backend_pid()",
                (f"LISTEN {wakeup.CHANNEL}",),
            ).fetchall()
        assert cut == [(True,)]
        await _until(lambda: not dispatch._listened.is_set())  # polling meanwhile
        await _until(dispatch._listened.is_set)  # and listening again
        client = await asyncio.to_thread(DBOSClient, system_database_url=pg_url)
        options: Any = {"queue_name": "wq2", "workflow_name": "wakeup.echo"}
        handle = await client.enqueue_async(options, "again")
        assert await asyncio.wait_for(handle.get_result(), LONG_POLL / 4) == "again"
    finally:
        if client is not None:
            await asyncio.to_thread(client.destroy)
        await shutdown_async()


async def test_the_trigger_is_made_once(pg_url: str) -> None:
    for _ in range(2):
        launch(DurableConfig(pg_url))
        await shutdown_async()
    with psycopg.connect(pg_url) as conn:
        count = conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgname = %s", (wakeup.TRIGGER,)
        ).fetchone()
    assert count == (1,)


async def test_a_trigger_dropped_while_listening_is_made_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wakeup, "CHECK_SECONDS", 0.2)
    launch(DurableConfig(pg_url))
    client = None
    try:
        await DBOS.register_queue_async("wq3", polling_interval_sec=LONG_POLL)
        await _until(lambda: "wq3" in dispatch._BELLS and dispatch._listened.is_set())
        with psycopg.connect(pg_url, autocommit=True) as admin:
            (table,) = admin.execute(
                "SELECT tgrelid::regclass::text FROM pg_trigger WHERE tgname = %s",
                (wakeup.TRIGGER,),
            ).fetchone() or ("",)
            admin.execute(f"DROP TRIGGER {wakeup.TRIGGER} ON {table}")  # as a migration would

            def made_again() -> bool:
                found = admin.execute(
                    "SELECT count(*) FROM pg_trigger WHERE tgname = %s", (wakeup.TRIGGER,)
                ).fetchone()
                return found == (1,)

            await _until(made_again)
        await asyncio.sleep(0.5)  # the look it rang found the queue empty
        client = await asyncio.to_thread(DBOSClient, system_database_url=pg_url)
        options: Any = {"queue_name": "wq3", "workflow_name": "wakeup.echo"}
        started = time.monotonic()
        handle = await client.enqueue_async(options, "still")
        assert await asyncio.wait_for(handle.get_result(), LONG_POLL / 4) == "still"
        assert time.monotonic() - started < LONG_POLL / 4  # woken, not at the next poll
        assert dispatch._listened.is_set()
    finally:
        if client is not None:
            await asyncio.to_thread(client.destroy)
        await shutdown_async()
