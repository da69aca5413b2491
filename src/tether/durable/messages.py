"""A message sent in this process wakes its receiver here at once.

On SQLite DBOS 3.4 has no notifications: a workflow waiting in ``DBOS.recv`` (a durable
agent's wait for staff's decisions, :func:`~tether.durable.await_decisions`) is woken
by a thread that looks for its message every polling interval
(``DurableConfig.polling_interval_seconds``). :func:`install` makes a send that commits
in this process (through DBOS, or a :class:`dbos.DBOSClient` given to
:func:`watch_client`) wake the receivers of its destination and topic that wait here,
as the polling thread would on its next look: the receiver reads its message from the
log as before (a wake with nothing to read is harmless). Receivers in other processes,
and messages sent by other processes, keep the polling.

The DBOS code this relies on is checked against the pinned release's source; a release
that changed it is refused with :class:`ConfigError`, naming the installed DBOS
(``tests/durable/test_message_wake.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tether.durable.fence import require_known, source_digest

_EXPECTED_DIGEST = "d713b0ea9731ad9e"
"""Digest of DBOS 3.4.0's ``send_bulk``, the setup of a ``recv`` (which registers the
waiter) and the polling listener (which wakes it)."""

_HOOKED = "_tether_messages"

_receivers: list[Any] = []
"""The waiters' registry of DBOS's running system database in this process."""


def _source_digest() -> str:
    from dbos._sys_db import SystemDatabase

    return source_digest(
        SystemDatabase.send_bulk,
        SystemDatabase.recv_setup,
        SystemDatabase._notification_listener_polling,
    )


def install(sys_db: Any) -> None:
    """Let sends through ``sys_db`` (DBOS's running system database) wake the receivers
    that wait in this process."""
    require_known(_source_digest(), _EXPECTED_DIGEST, "its messages' wait")
    _receivers[:] = [sys_db.notifications_map]
    _wake_after_send(sys_db)


def watch_client(client: Any) -> None:
    """Let ``client``'s sends (a :class:`dbos.DBOSClient`) wake receivers here too."""
    _wake_after_send(client._sys_db)


def _wake_after_send(sys_db: Any) -> None:
    if getattr(sys_db, _HOOKED, False):
        return
    setattr(sys_db, _HOOKED, True)
    sys_db.send_bulk = _waking(sys_db.send_bulk)


def _waking(send: Callable[..., Any]) -> Callable[..., Any]:
    def send_bulk(messages: Any, *args: Any, **kwargs: Any) -> Any:
        out = send(messages, *args, **kwargs)  # committed: a receiver now reads it
        wake({(m.destination_id, _topic(m.topic)) for m in messages})
        return out

    return send_bulk


def wake(sent: set[tuple[str, str]]) -> None:
    """Wake this process's receivers waiting for ``(destination, topic)`` in ``sent``."""
    for waiting in list(_receivers):
        for _key, (destination, topic, _shard), signal in waiting.snapshot():
            if (destination, topic) in sent:
                signal.set()


def _topic(topic: str | None) -> str:
    from dbos._sys_db import _dbos_null_topic

    return topic if topic is not None else _dbos_null_topic
