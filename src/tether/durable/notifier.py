"""DBOS's PostgreSQL notifier thread, woken by what it has to send instead of a clock.

On PostgreSQL, DBOS 3.4 sends the notifications that wake a waiting ``recv``,
``get_event`` or stream reader from one thread per process, off the write path: a write
adds its payload to a pending set, and the thread sends the set, coalesced, every
``notification_coalesce_sec`` (10 ms). It wakes a hundred times a second to find the set
empty nearly every time: a third of what an idle worker spends, and a hundred context
switches a second.

:func:`install` makes the thread wait until a payload is added, then wait the same
coalescing interval and send the set as DBOS does (the same statement, transaction and
errors; the final send at shutdown too). A payload is sent at most one interval after it
was added, as before; a stop wakes the thread at once. It replaces the methods on
``PostgresSystemDatabase`` before DBOS starts (the thread's target is bound at launch),
after checking them against the pinned DBOS's source: a release that changed them is
refused with :class:`ConfigError`, naming the installed DBOS
(``tests/durable/test_notifier.py``).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tether.durable.fence import require_known, source_digest

_EXPECTED_DIGEST = "7fb3c48e3a92e2cd"
"""Digest of ``PostgresSystemDatabase.run_notifier``, ``._signal_notification``,
``._flush_notifications`` and ``._cleanup_connections`` in DBOS 3.4.0."""

_WAKE = "_tether_notifier_wake"
"""The attribute holding a system database's :class:`threading.Event`."""

_stock: dict[str, Any] = {}
"""DBOS's own methods, by name, once :func:`install` replaced them."""


def _source_digest() -> str:
    from dbos._sys_db_postgres import PostgresSystemDatabase as Pg

    return source_digest(*(_stock.get(name, getattr(Pg, name)) for name in _CHECKED))


def install() -> None:
    """Make the notifier thread of every PostgreSQL system database DBOS starts from now on
    wait for work (call it before ``DBOS.launch``); idempotent."""
    from dbos._sys_db_postgres import PostgresSystemDatabase as Pg

    if _stock:
        return
    require_known(_source_digest(), _EXPECTED_DIGEST, "its notifier thread")
    for name, replacement in _REPLACED.items():
        _stock[name] = getattr(Pg, name)
        setattr(Pg, name, replacement)


def _wake(sys_db: Any) -> threading.Event:
    event: threading.Event = sys_db.__dict__.setdefault(_WAKE, threading.Event())
    return event


def _signal_notification(self: Any, channel: str, payload: str) -> None:
    """DBOS's: add ``payload`` to the pending set; then wake the notifier thread."""
    _stock["_signal_notification"](self, channel, payload)
    if self.use_listen_notify:
        _wake(self).set()


def _cleanup_connections(self: Any) -> None:
    """DBOS's; at a stop (DBOS calls it once background work is told to end), also wake
    the notifier thread, which then sends what is pending and ends."""
    _stock["_cleanup_connections"](self)
    if not self._run_background_processes:
        _wake(self).set()


def run_notifier(self: Any) -> None:
    """DBOS's loop, waiting for a payload instead of waking every interval."""
    from dbos._logger import dbos_logger

    if not self.use_listen_notify:
        return
    wake = _wake(self)
    while self._run_background_processes:
        try:
            wake.wait()
            if not self._run_background_processes:
                break
            time.sleep(self._notification_coalesce_sec)  # coalesce, as DBOS does
            wake.clear()  # before the send: a payload added from now on wakes it again
            self._flush_notifications()
        except Exception as e:
            if self._run_background_processes:
                dbos_logger.warning(f"Notifier error: {e}")
                time.sleep(1)
    try:
        self._flush_notifications()
    except Exception as e:
        dbos_logger.warning(f"Notifier final flush error: {e}")


_REPLACED = {
    "run_notifier": run_notifier,
    "_signal_notification": _signal_notification,
    "_cleanup_connections": _cleanup_connections,
}
_CHECKED = ("run_notifier", "_signal_notification", "_flush_notifications", "_cleanup_connections")
"""The methods whose source the digest covers: those replaced and the send they call."""
