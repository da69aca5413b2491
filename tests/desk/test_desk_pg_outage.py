"""A durable desk on PostgreSQL whose server stops while a ticket runs and starts again:
the step that meets the lost connection retries, the run waits, and once the server is
back the run goes on in the same process, without a restart; new tickets run too.

The test starts a server of its own (the session's ``pg_server`` is shared by other
tests, which must not see it stop)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from durable_ops import status, until
from helpers import ticket_id_by_order

from postgres_server import PostgresServer, postgres_server
from tether_desk.db import Database
from tether_desk.durable import DurableDesk, DurableSettings
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed

OUTAGE_SECONDS = 6.0


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    with postgres_server(max_connections=100) as server:
        yield server


async def test_a_lost_postgres_connection_heals_without_a_restart(
    own_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether_desk")
    db = Database(own_server.create_database("outage"))
    db.migrate()
    seed(db)
    desk = Desk(db, DeskScriptedModel())
    first = ticket_id_by_order(db, "C-2210")
    gate = asyncio.Event()

    async def boundary(name: str, ticket: int) -> None:
        if name == "model.before:1" and ticket == first:  # triage logged, ticket triaging
            await gate.wait()

    runs = DurableDesk(desk, DurableSettings(poll_seconds=0.05), boundary=boundary)
    await runs.start()
    try:
        await runs.submit(first)
        await until(lambda: status(db, first) == "triaging")
        await asyncio.to_thread(own_server.stop)
        assert not own_server.alive()
        gate.set()  # the refund agent's first step meets the lost connection
        await asyncio.sleep(OUTAGE_SECONDS)
        assert "connection" in caplog.text.lower(), "the outage went unnoticed"
        await asyncio.to_thread(own_server.start)  # the fault clears
        await until(lambda: status(db, first) == "awaiting_approval", 90)
        # the process goes on serving: a ticket submitted after the outage runs too
        second = ticket_id_by_order(db, "C-1187")
        await runs.submit(second)
        await until(lambda: status(db, second) not in ("new", "triaging"), 90)
    finally:
        if not own_server.alive():
            await asyncio.to_thread(own_server.start)
        await runs.stop()
        db.dispose()
