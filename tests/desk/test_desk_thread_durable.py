"""A reopened ticket on the durable desk (``tether serve``'s default): the customer's reply
starts the ticket's next round, a workflow of its own, which proposes from the new
message; queueing again runs each round once. A reply while the ticket is triaged or its
refund waits starts the next round once the workflow in progress ends."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from dbos import DBOS
from helpers import customer_id, pending_approval, staff_id, ticket, ticket_id_by_order
from sqlalchemy import select
from test_desk_thread_rounds import Hooked

from tether_desk.db import Database, sqlite_url
from tether_desk.decisions import decide
from tether_desk.durable import DurableDesk, DurableSettings, workflow_id
from tether_desk.models import Ticket
from tether_desk.pipeline import Desk
from tether_desk.seed import seed
from tether_desk.thread import RUNS_AGAIN, customer_reply, thread
from tether_desk.tickets import open_ticket, send_reply


@pytest.fixture(scope="module")
def durable(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    db = Database(sqlite_url(tmp_path_factory.mktemp("durable-thread") / "desk.db"))
    db.migrate()
    seed(db)
    desk = Desk(db, Hooked())
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


async def test_a_reply_during_a_durable_round_runs_the_next_one_when_it_ends(
    durable: Desk,
) -> None:
    db, runs, model = durable.db, durable.runs, durable.client
    assert runs is not None and isinstance(model, Hooked)
    lea = customer_id(db, "lea.bernard@client.example")
    asked = "Puis-je changer l'adresse de livraison, rue des Lilas ?"
    address = open_ticket(db, lea, "C-3107", "Adresse", asked)  # a person's, until...
    said = "Et le colis est arrive casse, remboursez 20 EUR."
    model.only = "rue des Lilas"
    model.hooks["triage"] = lambda: customer_reply(db, lea, address, said)
    await runs.submit_new()
    for _ in range(1200):  # its round ends (a person's), and the next one is due
        if ticket(db, address).round == 1:
            break
        await asyncio.sleep(0.05)
    assert ticket(db, address).status == "new"
    assert await runs.submit_new() >= 1
    await until(db, address, "awaiting_approval")
    first = pending_approval(db, address)
    assert first is not None and first.amount_cents == 2000

    # a reply while that refund waits: the approval's workflow runs the next round after it
    assert not customer_reply(db, lea, address, "Et 4 EUR de frais de port, svp.")
    await decide(durable, first.id, staff_id(db), approve=True)
    await until(db, address, "new")
    assert await runs.submit_new() >= 1
    await until(db, address, "awaiting_approval")
    second = pending_approval(db, address)
    assert second is not None and second.amount_cents == 400
    rounds = [m.body for m in thread(db, address, staff=True)].count(RUNS_AGAIN)
    assert rounds == 2
    assert (await DBOS.get_workflow_status_async(workflow_id(address, 2))) is not None
