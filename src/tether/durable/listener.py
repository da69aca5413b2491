"""A stop that does not wait out DBOS's SQLite listener between two of its looks.

On SQLite (no notifications), DBOS 3.4 looks for the messages, events and stream rows its
runs wait for in a thread that sleeps its polling interval between looks
(``DurableConfig.polling_interval_seconds``; the desk's ``wait_poll_seconds``, 1 s), and
``DBOS.destroy`` joins that thread: every stop waited for the rest of its sleep (0.6 s on
the desk, measured), and nothing wakes a ``time.sleep``. :func:`release`, called by
:func:`~tether.durable.runtime.shutdown` just before ``DBOS.destroy``, takes the thread out
of the ones the stop joins when no wait is registered with it (a wait still registered
keeps the join, as before). It then ends by itself at its next wake-up: it reads the
database only for registered waits, and finds DBOS stopped. It is a daemon thread, so a
process that exits meanwhile does not wait for it either. On PostgreSQL the listener waits
on its connection, which the stop closes: it is left as it is.

What this relies on (the thread DBOS keeps, what it does when it wakes, what the stop joins)
is checked against the pinned DBOS's source at launch: a release that changed it is refused
with :class:`~tether.errors.ConfigError`, never worked around silently.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any

from tether.durable.fence import require_known, source_digest

_EXPECTED_DIGEST = "6aa45ee56b2d9d94"
"""Digest of the listener's loop, its start, SQLite's listener and ``DBOS._destroy`` in
DBOS 3.4.0."""


@cache
def _source_digest() -> str:
    from dbos._dbos import DBOS
    from dbos._sys_db import SystemDatabase
    from dbos._sys_db_sqlite import SQLiteSystemDatabase

    return source_digest(
        SystemDatabase._notification_listener_polling,
        SystemDatabase.run_notification_listener,
        SQLiteSystemDatabase._notification_listener,
        DBOS._destroy,
    )


def verify() -> None:
    """Refuse a DBOS whose listener or stop is not the one :func:`release` knows."""
    require_known(_source_digest(), _EXPECTED_DIGEST, "its notification listener or its stop")


def release(dbos: Any) -> threading.Thread | None:
    """Take ``dbos``'s (the running DBOS instance's) SQLite listener thread out of the
    threads its stop joins, unless a wait is registered with it; the thread taken out,
    or ``None``."""
    sys_db: Any = dbos._sys_db_field
    if sys_db is None or not sys_db._is_sqlite:  # PostgreSQL's listener waits on its socket
        return None
    waits = (sys_db.notifications_map, sys_db.workflow_events_map, sys_db.streams_map)
    if any(w.snapshot() for w in waits):  # it still has a read to make for one
        return None
    for thread in list(dbos._background_threads):
        if getattr(thread, "_target", None) == sys_db.run_notification_listener:
            dbos._background_threads.remove(thread)
            return thread  # type: ignore[no-any-return]
    return None
