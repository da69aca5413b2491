"""A worker's look at its queue without re-reading the queue's settings every time.

DBOS 3.4 keeps a registered queue's settings (concurrency, polling interval) in the system
database and its queue thread reads them again before every look at the queue: one more
transaction per look, a third of what an idle worker spends polling; each look also reads
the application's latest version (whether this worker may take runs of no version), a
union of two probes of the versions table. :func:`install` lets a queue thread reuse
what it read of both for :data:`SETTINGS_SECONDS`, so a change of a queue's settings or
a newer version registered reaches a running worker within that time instead of at its
next look. Claims, counts and everything else of a look are unchanged; other callers (a
client, a ``DBOS.retrieve_queue``, a recovery) always read the database.

It replaces ``get_queue`` and ``_is_latest_version`` on DBOS's running system database
after checking them and the queue thread's naming against the pinned DBOS's source; a
release that changed them is refused with :class:`ConfigError`, naming the installed DBOS
(``tests/durable/test_queueconfig.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from tether.durable.fence import require_known, source_digest

T = TypeVar("T")
SETTINGS_SECONDS = 5.0
"""How long a queue thread reuses the settings it read."""

QUEUE_THREAD_PREFIX = "queue-worker-"
"""DBOS names each queue's thread ``queue-worker-NAME``."""

_EXPECTED_DIGEST = "e89c1db6272df187"
"""Digest of ``SystemDatabase.get_queue`` and ``._is_latest_version`` and the queue
threads' code in DBOS 3.4.0."""


def _source_digest() -> str:
    from dbos import _queue
    from dbos._sys_db import SystemDatabase

    from tether.durable.dispatch import dbos_queue_worker

    return source_digest(
        SystemDatabase.get_queue,
        SystemDatabase._is_latest_version,
        dbos_queue_worker(),
        _queue.queue_thread,
    )


def install(sys_db: Any, seconds: float = SETTINGS_SECONDS) -> None:
    """Let the queue threads of DBOS's running ``sys_db`` reuse a queue's settings for
    ``seconds``."""
    require_known(_source_digest(), _EXPECTED_DIGEST, "its queue polling")
    sys_db.get_queue = _reusing(sys_db.get_queue, seconds)
    sys_db._is_latest_version = _reusing_version(sys_db._is_latest_version, seconds)


def _in_queue_thread() -> bool:
    return threading.current_thread().name.startswith(QUEUE_THREAD_PREFIX)


class _Kept:
    """Values read per key, each reused for ``seconds`` after its read."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._read_at: dict[str, tuple[float, Any]] = {}

    def get(self, key: str, read: Callable[[], T]) -> T:
        now = time.monotonic()
        known = self._read_at.get(key)
        if known is not None and now - known[0] < self.seconds:
            value: T = known[1]
            return value
        value = read()
        self._read_at[key] = (now, value)
        return value


def _reusing(read: Callable[..., Any], seconds: float) -> Callable[..., Any]:
    kept = _Kept(seconds)

    def get_queue(name: str, *, client_system_database: Any = None) -> Any:
        if client_system_database is not None or not _in_queue_thread():
            return read(name, client_system_database=client_system_database)
        return kept.get(name, lambda: read(name))

    return get_queue


def _reusing_version(read: Callable[..., bool], seconds: float) -> Callable[..., bool]:
    kept = _Kept(seconds)

    def is_latest_version(app_version: str, c: Any = None) -> bool:
        if not _in_queue_thread():
            return read(app_version, c)
        return kept.get(app_version, lambda: read(app_version, c))

    return is_latest_version
