"""A reopened ticket on the durable desk (``tether serve``'s default): the customer's reply
starts the ticket's next round, a workflow of its own, which proposes from the new
message; queueing again runs each round once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from dbos import DBOS
from helpers import customer_id, pending_approval, staff_id, ticket_id_by_order
from sqlalchemy import select

from tether_desk.db import Database, sqlite_url
from tether_desk.decisions import decide
from tether_desk.durable import DurableDesk, DurableSettings, workflow_id
from tether_desk.models import Ticket
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed
from tether_desk.thread import customer_reply
from tether_desk.tickets import send_reply


@pytest.fixture(scope="module")
def durable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    db = Database(sqlite_url(tmp_path_factory.mktemp("durable-thread") / "desk.db"))
    db.migrate()
    seed(db)
    desk = Desk(db, DeskScriptedModel())
    runs = DurableDesk(desk, DurableSettings(poll_seconds=0.05))
    asyncio.run(runs.start())
    yield desk
    asyncio.run(runs.stop())
    db.dispose()


async def until(db: Database, ticket_id: int, status: str) -> None:
    for _ in range(1200):
        with db.read_connection() as c:
            now = c.scalar(select(Ticket.status).where(Ticket.id == ticket_id))
        if now == status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"ticket {ticket_id} stayed {now}")


async def test_a_reopened_ticket_runs_again_as_its_next_round(durable: Desk) -> None:
    db, runs = durable.db, durable.runs
    assert runs is not None
    tid = ticket_id_by_order(db, "C-2210")
    await runs.submit_new()
    await until(db, tid, "awaiting_approval")
    first = pending_approval(db, tid)
    assert first is not None and first.amount_cents == 1200
    await decide(durable, first.id, staff_id(db), approve=True)
    await until(db, tid, "draft_ready")
    send_reply(db, tid, staff_id(db))

    paul = customer_id(db, "paul.martin@client.example")
    assert customer_reply(db, paul, tid, "Il manque aussi le chargeur : 5 EUR.")
    assert await runs.submit_new() >= 1
    assert await runs.submit_new() == 0  # queued once
    await until(db, tid, "awaiting_approval")
    second = pending_approval(db, tid)
    assert second is not None and second.amount_cents == 500 and second.id != first.id
    assert (await DBOS.get_workflow_status_async(workflow_id(tid, 1))) is not None
