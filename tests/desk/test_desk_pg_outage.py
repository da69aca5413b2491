"""A durable desk on PostgreSQL whose server stops while a ticket runs, then starts again:
the run goes on in the same process, without a restart, and new tickets run too.

A short outage is absorbed inside the step that meets it (its write is retried); a long
one outlasts those retries, the step fails, and the process's healer resumes the run once
the server is back. Each test starts a server of its own: the session's ``pg_server`` is
shared by other tests, which must not see it stop."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator

import pytest
from durable_ops import status, until
from helpers import ticket_id_by_order
from sqlalchemy import select

from postgres_server import PostgresServer, postgres_server
from tether_desk.db import Database
from tether_desk.durable import DurableDesk, DurableSettings
from tether_desk.models import Approval, Run
from tether_desk.operations.transient import retry_transient
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed

STOP_AT = "approval.requested"
"""Inside the step that stores the refund's approval row, before its write."""


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    with postgres_server(max_connections=100) as server:
        yield server


def refund_runs(db: Database, ticket_id: int) -> list[str]:
    with db.read_connection() as c:
        return list(c.scalars(select(Run.kind).where(Run.ticket_id == ticket_id)))


def approvals(db: Database, ticket_id: int) -> int:
    with db.read_connection() as c:
        return len(list(c.scalars(select(Approval.id).where(Approval.ticket_id == ticket_id))))


@pytest.mark.parametrize(
    ("outage", "healed_by"),
    [(2.0, "transient database error, retrying"), (12.0, "healed after a transient fault")],
    ids=["within-the-step-retries", "past-them"],
)
async def test_a_lost_postgres_connection_heals_without_a_restart(
    own_server: PostgresServer, caplog: pytest.LogCaptureFixture, outage: float, healed_by: str
) -> None:
    caplog.set_level(logging.WARNING, logger="tether_desk")
    db = Database(own_server.create_database("outage"))
    db.migrate()
    seed(db)
    desk = Desk(db, DeskScriptedModel())
    first = ticket_id_by_order(db, "C-2210")
    reached, gate = threading.Event(), threading.Event()  # the workflows run on DBOS's loop

    async def boundary(name: str, ticket: int) -> None:
        if name == STOP_AT and ticket == first and not gate.is_set():
            reached.set()
            await asyncio.to_thread(gate.wait)

    runs = DurableDesk(desk, DurableSettings(poll_seconds=0.05), boundary=boundary)
    await runs.start()
    try:
        await runs.submit(first)
        assert await asyncio.to_thread(reached.wait, 90)
        await asyncio.to_thread(own_server.stop)
        assert not own_server.alive()
        gate.set()  # the step's write meets the lost connection
        await asyncio.sleep(outage)
        await asyncio.to_thread(own_server.start)  # the fault clears
        await until(lambda: status(db, first) == "awaiting_approval", 120)
        assert approvals(db, first) == 1  # stored once, whatever was retried
        assert healed_by in caplog.text
        assert "refund" in refund_runs(db, first)  # its trace was written after all
        second = ticket_id_by_order(db, "C-1187")  # a ticket submitted after the outage
        await runs.submit(second)
        await until(lambda: status(db, second) not in ("new", "triaging"), 90)
    finally:
        if not own_server.alive():
            await asyncio.to_thread(own_server.start)
        await runs.stop()
        db.dispose()


def test_the_step_retries_cover_the_short_outage_but_not_the_long_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The two outages above sit on either side of what a step's retries wait in all."""
    slept: list[float] = []

    async def refused() -> None:
        raise OSError("connection refused")

    async def count(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", count)
    with pytest.raises(OSError, match="connection refused"):
        asyncio.run(retry_transient(refused))
    assert 2.0 < sum(slept) < 12.0
