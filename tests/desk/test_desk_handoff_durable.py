"""A decision taken in the process that runs a durable desk's tickets starts the run's
finish there and then, while a place is free: the queue is polled once a minute here, and
its thread is never woken, yet the refund is drafted at once; waiting for the finish's
result in this process ends when it is written, not at the next poll."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from dbos import DBOS, SetWorkflowID
from helpers import add_ticket, pending_approval, refunds_by_order, staff_id, until_status

from tether.durable import dispatch
from tether_desk.db import Database, sqlite_url
from tether_desk.decisions import claim_decision, resume
from tether_desk.durable import DurableDesk, DurableSettings, finish_id, workflow_id
from tether_desk.durable.flow import ticket_workflow
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed

LONG_POLL = 60.0
"""The queue's and the waits' polling interval: longer than the test may take."""
TEXT = "Le colis est arrive abime, merci de me rembourser 12 EUR."


@pytest.fixture(scope="module")
def slow_polls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    db = Database(sqlite_url(tmp_path_factory.mktemp("handoff-desk") / "desk.db"))
    db.migrate()
    seed(db, tickets=False)
    desk = Desk(db, DeskScriptedModel())
    settings = DurableSettings(poll_seconds=LONG_POLL, wait_poll_seconds=LONG_POLL)
    runs = DurableDesk(desk, settings)
    asyncio.run(runs.start())
    yield desk
    asyncio.run(runs.stop())
    db.dispose()


async def test_a_decision_here_starts_the_finish_without_the_queue_thread(
    slow_polls: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    desk = slow_polls
    tid = add_ticket(desk.db, TEXT, number="C-7101")
    with SetWorkflowID(workflow_id(tid)):  # the ticket's own workflow, started directly
        handle = await DBOS.start_workflow_async(ticket_workflow, tid)
    assert await handle.get_result() == "awaiting_approval"
    approval = pending_approval(desk.db, tid)
    assert approval is not None
    rung: list[str] = []
    monkeypatch.setattr(dispatch.Doorbell, "ring", lambda self: rung.append(self.queue.name))

    started = time.monotonic()
    claimed = claim_decision(desk, approval.id, staff_id(desk.db), approve=True)
    await resume(desk, claimed)
    assert rung == []  # the queue's thread was not asked to look
    finish = await DBOS.retrieve_workflow_async(finish_id(approval.run_id, approval.call_id))
    assert await finish.get_result(polling_interval_sec=LONG_POLL) == "draft_ready"
    assert time.monotonic() - started < LONG_POLL / 4  # neither a poll nor a wait for one
    assert await until_status(desk.db, tid, "draft_ready") == "draft_ready"
    assert refunds_by_order(desk.db)["C-7101"] == 1200
