"""Fixtures of the desk's tests: a migrated SQLite file per test, seeded; a fresh
PostgreSQL database per test on the session's server (``tests/conftest.py``); a durable desk
per test module; for the
browser tests, Debian's Chromium and ``tether serve`` on a fresh database."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tether_desk.db import Database, sqlite_url
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed

if TYPE_CHECKING:
    from desk_server import Served
    from playwright.sync_api import Browser


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


@pytest.fixture(scope="module")
def durable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    """A seeded desk whose tickets run as workflows in this process (DBOS launched, quick
    polls), one per test module."""
    from tether_desk.durable import DurableDesk, DurableSettings

    db = Database(sqlite_url(tmp_path_factory.mktemp("durable-desk") / "desk.db"))
    db.migrate()
    seed(db)
    desk = Desk(db, DeskScriptedModel())
    runs = DurableDesk(desk, DurableSettings(poll_seconds=0.05, wait_poll_seconds=0.05))
    asyncio.run(runs.start())
    yield desk
    asyncio.run(runs.stop())
    db.dispose()


@pytest.fixture
def pg_db(pg_url: str) -> Iterator[Database]:
    """A fresh database on the session's PostgreSQL server, migrated and seeded."""
    database = Database(pg_url)
    database.migrate()
    seed(database)
    yield database
    database.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db(request: pytest.FixtureRequest) -> Database:
    """The desk's database on SQLite (``db``), then on PostgreSQL (``pg_db``)."""
    name = "db" if request.param == "sqlite" else "pg_db"
    database: Database = request.getfixturevalue(name)
    return database


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium through Playwright, one per test module (each page in a context
    of its own: see ``browsing.log_in``)."""
    from browsing import CHROMIUM, FLAGS
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium is not installed: apt-get install chromium (.ci/run does)")
    with sync_playwright() as p:
        # launch() gives Chromium a fresh temporary profile (--user-data-dir) of its own
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield b
        b.close()


@pytest.fixture
def desk_server(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Served, Database]]:
    """``tether serve`` on a fresh database, and that database: the scripted model whose
    replies take the module's ``DESK_MODEL`` (or the test's parameter; default
    ``scripted:0.3``). It must stop cleanly (and, with the module's ``NO_TRACEBACK``,
    without a traceback in its output)."""
    from desk_server import serve

    path = tmp_path / "desk.db"
    model = getattr(request, "param", getattr(request.module, "DESK_MODEL", "scripted:0.3"))
    with serve(str(path), model=model) as served:
        database = Database(sqlite_url(path))
        yield served, database
        database.dispose()
    assert served.process.returncode == 0, served.output
    if getattr(request.module, "NO_TRACEBACK", False):
        assert "Traceback" not in served.output, served.output
