"""The desk's PostgreSQL pool pings a connection before lending it only after it sat idle:
a connection the server cut while it was idle is replaced, never handed to a caller, and
a busy process pays no round trip per transaction."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from sqlalchemy import text

from tether_desk import db as db_module
from tether_desk.db import Database


@pytest.fixture
def database(pg_url: str) -> Iterator[Database]:
    database = Database(pg_url, pool_size=1)
    yield database
    database.dispose()


def backend_pid(database: Database) -> int:
    with database.read_connection() as c:
        return int(c.scalar(text("SELECT pg_backend_pid()")) or 0)


def test_a_connection_lent_again_at_once_is_not_pinged(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    pinged: list[object] = []
    real = database.engine.dialect.do_ping
    monkeypatch.setattr(database.engine.dialect, "do_ping", lambda c: pinged.append(c) or real(c))
    for _ in range(5):
        backend_pid(database)
    assert pinged == []


def test_a_connection_cut_while_idle_is_replaced_before_it_is_lent(
    database: Database, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db_module, "PING_IDLE_SECONDS", 0.0)
    first = backend_pid(database)
    with psycopg.connect(pg_url.replace("+psycopg", "")) as admin:
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (first,))  # waits
    second = backend_pid(database)  # would fail with a lost connection without the ping
    assert second != first
