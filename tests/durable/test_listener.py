"""A stop on SQLite does not wait out the listener's polling interval (a minute here): the
listener is left to end at its next wake-up, by itself, unless a wait is registered with
it; on PostgreSQL, and with a wait registered, the stop joins it as DBOS does; a DBOS
whose listener or stop changed is refused by name."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from dbos import _dbos

from tether.durable import DurableConfig, launch, listener, shutdown, shutdown_async
from tether.errors import ConfigError

LONG_POLL = 60.0
"""A polling interval longer than any of these tests may take."""


def _listener_thread() -> threading.Thread:
    instance: Any = _dbos._dbos_global_instance
    sys_db = instance._sys_db_field
    found: list[threading.Thread] = [
        t
        for t in instance._background_threads
        if getattr(t, "_target", None) == sys_db.run_notification_listener
    ]
    assert len(found) == 1
    return found[0]


async def test_a_stop_on_sqlite_does_not_wait_for_the_listeners_next_look(
    tmp_path: Path,
) -> None:
    launch(
        DurableConfig(f"sqlite:///{tmp_path / 'runs.sqlite'}", polling_interval_seconds=LONG_POLL)
    )
    thread = _listener_thread()
    started = time.monotonic()
    await shutdown_async()
    assert time.monotonic() - started < LONG_POLL / 4
    assert thread.is_alive() and thread.daemon  # asleep, not joined; no exit waits for it


def test_the_listener_left_behind_ends_by_itself_and_dbos_starts_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    launch(DurableConfig(url, polling_interval_seconds=0.05))
    first = _listener_thread()
    shutdown()
    first.join(30)
    assert not first.is_alive()
    launch(DurableConfig(url, polling_interval_seconds=0.05))
    try:
        second = _listener_thread()
        assert second is not first and second.is_alive()
    finally:
        shutdown()


def test_a_registered_wait_keeps_the_listener_joined(tmp_path: Path) -> None:
    from dbos._utils import LoopAwareEvent

    launch(DurableConfig(f"sqlite:///{tmp_path / 'runs.sqlite'}", polling_interval_seconds=0.05))
    instance: Any = _dbos._dbos_global_instance
    sys_db = instance._sys_db_field
    thread = _listener_thread()
    event = LoopAwareEvent()
    sys_db.notifications_map.add("w::topic", event, ("w", "topic", None))
    try:
        assert listener.release(instance) is None
        assert thread in instance._background_threads
    finally:
        shutdown()  # with the wait still registered
        sys_db.notifications_map.pop("w::topic", event)
    assert not thread.is_alive()  # joined by the stop, as DBOS does


def test_a_postgres_listener_is_left_to_dbos(pg_url: str) -> None:
    launch(DurableConfig(pg_url))
    instance: Any = _dbos._dbos_global_instance
    try:
        threads = list(instance._background_threads)
        assert listener.release(instance) is None
        assert instance._background_threads == threads
    finally:
        shutdown()


def test_a_dbos_whose_listener_or_stop_changed_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(listener, "_EXPECTED_DIGEST", "0" * 16)
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        launch(DurableConfig(f"sqlite:///{tmp_path / 'runs.sqlite'}"))
    assert _dbos._dbos_global_instance is None or not _dbos._dbos_global_instance._launched
