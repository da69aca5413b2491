"""The console's side of a durable desk on the log, on SQLite and PostgreSQL.

A decision on a run of the previous layout, which waits for it in a workflow of its own
(``desk-wait:RUN:CALL``): sent to that workflow (no finish workflow started), refused
while that workflow is stopped or logged by a version no live process runs, and taken
once a process of that version beats again. A run of the current layout gets its finish
workflow, its wait looked up once. New tickets are handed to the queue once, sweeps
included; on SQLite a few of them are queued without a thread hop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from helpers import pending_approval, staff_id, ticket_id_by_order

from tether.durable import DECISIONS_TOPIC
from tether_desk.db import Database, sqlite_url
from tether_desk.decisions import Claimed, claim_decision, resume
from tether_desk.durable import (
    APPROVAL_WORKFLOW,
    FINISH_WORKFLOW,
    TICKET_WORKFLOW,
    DurableDesk,
    DurableSettings,
    finish_id,
    wait_id,
    workflow_id,
)
from tether_desk.durable.runner import INLINE_TICKETS, SWEEP_EVERY
from tether_desk.errors import Conflict
from tether_desk.models import Approval, Ticket
from tether_desk.money import format_cents
from tether_desk.operations.liveness import beat
from tether_desk.pipeline import Desk, process_ticket
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed
from tether_desk.tickets import open_ticket

PARKED = "tests.parked"
"""A queue no process takes from: the wait stays as the previous layout left it."""


@pytest.fixture(params=["sqlite", "postgresql"])
async def console(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[DurableDesk]:
    """A console's durable desk (no DBOS runtime) and a refund awaiting approval."""
    if request.param == "sqlite":
        db = Database(sqlite_url(tmp_path / "desk.db"))
    else:
        db = Database(request.getfixturevalue("pg_url"))
    db.migrate()
    seed(db)
    desk = Desk(db, DeskScriptedModel())
    assert await process_ticket(desk, ticket_id_by_order(db, "C-2210")) == "awaiting_approval"
    runs = DurableDesk(desk, DurableSettings(), process=False)
    await runs.start()
    yield runs
    await runs.stop()
    db.dispose()


def _approval(runs: DurableDesk) -> Approval:
    a = pending_approval(runs.desk.db, ticket_id_by_order(runs.desk.db, "C-2210"))
    assert a is not None
    return a


def _park_wait(runs: DurableDesk, a: Approval, version: str = "1") -> str:
    """Log the previous layout's wait for the approval's call, as its run left it."""
    wid = wait_id(a.run_id, a.call_id)
    options: Any = {
        "queue_name": PARKED,
        "workflow_name": APPROVAL_WORKFLOW,
        "workflow_id": wid,
        "app_version": version,
    }
    runs.client.enqueue(options, {})
    return wid


def _messages_to(runs: DurableDesk, workflow_id: str) -> list[str]:
    """The topics of the messages sent to ``workflow_id`` (DBOS's notifications)."""
    table = sa.table(
        "notifications",
        sa.column("destination_uuid"),
        sa.column("topic"),
        schema=runs.log.schema,
    )
    query = sa.select(table.c.topic).where(table.c.destination_uuid == workflow_id)
    with runs.log.engine.connect() as c:
        return [str(t) for t in c.scalars(query)]


def _decide(runs: DurableDesk, a: Approval) -> Claimed:
    db = runs.desk.db
    typed = format_cents(a.amount_cents)
    return claim_decision(runs.desk, a.id, staff_id(db), approve=True, typed_amount=typed)


async def test_a_decision_on_a_run_of_the_previous_layout_is_sent_to_its_wait(
    console: DurableDesk,
) -> None:
    a = _approval(console)
    wid = _park_wait(console, a)
    claimed = _decide(console, a)
    assert claimed.legacy_wait is True
    await resume(console.desk, claimed)
    assert _messages_to(console, wid) == [DECISIONS_TOPIC]
    assert console.log.get(finish_id(a.run_id, a.call_id)) is None  # nothing else started


async def test_a_decision_on_a_run_of_this_layout_starts_its_finish(
    console: DurableDesk,
) -> None:
    a = _approval(console)
    claimed = _decide(console, a)
    assert claimed.legacy_wait is False  # looked up once, on the claim
    await resume(console.desk, claimed)
    finish = console.log.get(finish_id(a.run_id, a.call_id))
    assert finish is not None and (finish.name, finish.status) == (FINISH_WORKFLOW, "ENQUEUED")
    assert _messages_to(console, wait_id(a.run_id, a.call_id)) == []


async def test_a_stopped_wait_of_the_previous_layout_refuses_the_decision(
    console: DurableDesk,
) -> None:
    a = _approval(console)
    wid = _park_wait(console, a)
    console.client.cancel_workflow(wid)
    with pytest.raises(Conflict, match="This run stopped"):
        _decide(console, a)
    assert _approval(console).id == a.id  # still pending: nothing was claimed
    assert _messages_to(console, wid) == []


async def test_a_stranded_wait_is_refused_until_its_version_runs_again(
    console: DurableDesk,
) -> None:
    a = _approval(console)
    wid = _park_wait(console, a, version="0")
    with pytest.raises(Conflict, match="version 0 of the desk"):
        _decide(console, a)
    assert _approval(console).id == a.id
    beat(console.desk.db, "old-worker", "0")  # a process of version 0 is back
    claimed = _decide(console, a)
    await resume(console.desk, claimed)
    assert _messages_to(console, wid) == [DECISIONS_TOPIC]


async def test_new_tickets_are_handed_over_once_sweeps_included(console: DurableDesk) -> None:
    db = console.desk.db
    with db.read_connection() as c:
        new = set(c.scalars(sa.select(Ticket.id).where(Ticket.status == "new")))
    assert new  # the seed's
    assert await console.submit_new() == len(new)  # the first call sweeps from the start
    for _ in range(SWEEP_EVERY):  # one of them sweeps again
        assert await console.submit_new() == 0
    listed = console.client.list_workflows(name=TICKET_WORKFLOW, load_input=False)
    assert sorted(w.workflow_id for w in listed) == sorted(workflow_id(t) for t in new)
    assert all(w.status == "ENQUEUED" for w in listed)


async def test_a_few_new_tickets_are_queued_without_a_thread_hop_on_sqlite_only(
    console: DurableDesk, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = console.desk.db
    tid = ticket_id_by_order(db, "C-2210")
    with db.read_connection() as c:
        customer = int(c.scalar(sa.select(Ticket.customer_id).where(Ticket.id == tid)) or 0)
    hops: list[object] = []
    real_hop = asyncio.to_thread

    def hop(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(fn)
        return real_hop(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", hop)
    assert await console.submit_new() > 0  # the first call sweeps every new ticket
    assert len(hops) == 1  # in a thread, as every sweep
    one = open_ticket(db, customer, "C-2210", "Encore", "Toujours rien recu.")
    assert await console.submit_new() == 1
    assert len(hops) == (1 if db.dialect == "sqlite" else 2)  # SQLite: no hop for one
    many = [
        open_ticket(db, customer, "C-2210", "Encore", f"Message {i}.")
        for i in range(INLINE_TICKETS + 1)
    ]
    assert await console.submit_new() == len(many)
    assert len(hops) == (2 if db.dialect == "sqlite" else 3)  # more than a few: in a thread
    queued = console.log.existing(workflow_id(t) for t in [one, *many])
    assert queued == {workflow_id(t) for t in [one, *many]}
