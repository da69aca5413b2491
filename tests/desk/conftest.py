"""Fixtures of the desk's tests: a migrated SQLite file per test, seeded; PostgreSQL once
per session when its binaries are installed (``.ci/run`` installs them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from desk_pg import pg_bin, postgres_server
from sqlalchemy import text

from tether_desk.db import Database, sqlite_url
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(sqlite_url(tmp_path / "desk.db"))
    database.migrate()
    seed(database)
    yield database
    database.dispose()


@pytest.fixture
def desk(db: Database) -> Desk:
    return Desk(db, DeskScriptedModel())


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    if pg_bin() is None:
        pytest.fail("PostgreSQL is not installed: run `apt-get install postgresql` (.ci/run does)")
    with postgres_server() as url:
        yield url


@pytest.fixture
def pg_db(pg_url: str) -> Iterator[Database]:
    """A fresh schema on the session's PostgreSQL server, migrated and seeded."""
    admin = Database(pg_url)
    with admin.engine.begin() as c:
        c.execute(text("DROP SCHEMA public CASCADE"))
        c.execute(text("CREATE SCHEMA public"))
    admin.dispose()
    database = Database(pg_url)
    database.migrate()
    seed(database)
    yield database
    database.dispose()
