"""Fixtures of the desk's tests: a migrated SQLite file per test, seeded; a fresh
PostgreSQL database per test on the session's server (``tests/conftest.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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


@pytest.fixture
def pg_db(pg_url: str) -> Iterator[Database]:
    """A fresh database on the session's PostgreSQL server, migrated and seeded."""
    database = Database(pg_url)
    database.migrate()
    seed(database)
    yield database
    database.dispose()
