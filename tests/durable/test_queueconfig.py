"""A queue thread reads its queue's settings and the application's latest version once
per SETTINGS_SECONDS, any other caller every time; a DBOS whose queue polling changed is
refused by name."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS, _dbos

from tether.durable import DurableConfig, launch, queueconfig, shutdown_async
from tether.errors import ConfigError


class Log:
    def __init__(self) -> None:
        self.reads: list[str] = []

    def get_queue(self, name: str, *, client_system_database: Any = None) -> Any:
        self.reads.append(name)
        return {"name": name, "read": len(self.reads)}

    def _is_latest_version(self, app_version: str, c: Any = None) -> bool:
        self.reads.append(f"version {app_version}")
        return len(self.reads) % 2 == 1


def _in_thread(name: str, call: Any) -> Any:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(call()), name=name)
    t.start()
    t.join()
    return out[0]


def test_a_queue_thread_reuses_the_settings_it_read(monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log()
    queueconfig.install(log, seconds=60)
    worker = queueconfig.QUEUE_THREAD_PREFIX + "tickets"
    first = _in_thread(worker, lambda: log.get_queue("tickets"))
    again = [_in_thread(worker, lambda: log.get_queue("tickets")) for _ in range(5)]
    assert log.reads == ["tickets"] and all(q is first for q in again)
    assert _in_thread("console", lambda: log.get_queue("tickets"))["read"] == 2  # not reused
    assert log.get_queue("tickets")["read"] == 3  # nor from this thread
    _in_thread(worker, lambda: log.get_queue("other"))  # per queue
    assert log.reads == ["tickets", "tickets", "tickets", "other"]

    log.reads.clear()
    latest = [_in_thread(worker, lambda: log._is_latest_version("1", "conn")) for _ in range(4)]
    assert latest == [True] * 4 and log.reads == ["version 1"]
    assert _in_thread("console", lambda: log._is_latest_version("1")) is False  # read again
    assert log.reads == ["version 1", "version 1"]

    stale = Log()
    queueconfig.install(stale, seconds=0)  # no reuse past the time given
    for _ in range(3):
        _in_thread(worker, lambda: stale.get_queue("tickets"))
    assert stale.reads == ["tickets"] * 3


async def test_launch_installs_it_and_the_queue_still_runs(tmp_path: Path) -> None:
    launch(DurableConfig(f"sqlite:///{tmp_path / 'runs.sqlite'}", polling_interval_seconds=0.05))
    try:
        sys_db = _dbos._dbos_global_instance._sys_db  # type: ignore[union-attr]
        assert sys_db.get_queue.__qualname__.startswith("_reusing.")
        assert sys_db._is_latest_version.__qualname__.startswith("_reusing_version.")
        queue = await DBOS.register_queue_async("qc", polling_interval_sec=0.05)
        handle = await queue.enqueue_async(double, 21)
        assert await handle.get_result() == 42
    finally:
        await shutdown_async()


@DBOS.workflow(name="queueconfig.double")
async def double(n: int) -> int:
    return n * 2


def test_a_dbos_whose_queue_polling_changed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queueconfig, "_EXPECTED_DIGEST", "0" * 16)
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        queueconfig.install(Log())
