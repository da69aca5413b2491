"""DBOS's PostgreSQL notifier thread sleeps until a payload is added, still wakes a waiting
reader within its coalescing interval, stops at once, and a DBOS whose notifier changed is
refused by name."""

from __future__ import annotations

import asyncio
import time

import pytest
from dbos import DBOS
from dbos._sys_db_postgres import PostgresSystemDatabase

from tether.durable import DurableConfig, launch, notifier, shutdown_async
from tether.durable.runtime import _dbos_system_database
from tether.errors import ConfigError


@DBOS.workflow(name="notifier.publish")
async def publish(value: str) -> None:
    await DBOS.set_event_async("value", value)


async def test_the_notifier_waits_for_a_payload_and_sends_it_within_its_interval(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushes: list[float] = []
    launch(DurableConfig(pg_url, polling_interval_seconds=30.0))  # no polling fallback
    try:
        sys_db = _dbos_system_database()
        assert sys_db.use_listen_notify
        real = sys_db._flush_notifications

        def counted() -> None:
            flushes.append(time.monotonic())
            real()

        sys_db._flush_notifications = counted  # the thread calls it through the instance
        await asyncio.sleep(0.5)
        assert flushes == []  # idle: DBOS's own loop would have woken some fifty times
        handle = await DBOS.start_workflow_async(publish, "sent")
        t0 = time.monotonic()
        got = await DBOS.get_event_async(handle.get_workflow_id(), "value", timeout_seconds=10)
        assert got == "sent"
        assert time.monotonic() - t0 < 5  # woken by the notification, not by a poll
        assert 1 <= len(flushes) <= 3
    finally:
        t0 = time.monotonic()
        await shutdown_async()
    assert time.monotonic() - t0 < 5  # the waiting thread was woken by the stop


def test_a_dbos_whose_notifier_changed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    notifier.install()  # the pinned DBOS: installs, or was installed by a launch
    assert PostgresSystemDatabase.run_notifier is notifier.run_notifier
    for name, stock in notifier._stock.items():  # as if never installed
        monkeypatch.setattr(PostgresSystemDatabase, name, stock)
    monkeypatch.setattr(notifier, "_stock", {})
    monkeypatch.setattr(notifier, "_EXPECTED_DIGEST", "0" * 16)
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        notifier.install()
