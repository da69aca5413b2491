"""The operator's view of runs on a durable SQLite desk: a run the code no longer matches
(a step changed without raising the version) shows as ERROR, its ticket as needing
attention, and a retry carries it on; a run stranded by a version change is re-run under
the new one; a dead executor's runs show as waiting on it and are recovered (an approval
that waits for staff holds no run); a run that cannot go on is failed to an advisor."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from durable_ops import durable, log_path, status, stopped_after_its_step, stuck_in_triage, until
from helpers import pending_approval, refunds_by_order, staff_id
from sqlalchemy import select

from tether_desk.db import Database, sqlite_url
from tether_desk.decisions import claim_decision, resume
from tether_desk.durable import DurableDesk, DurableSettings, workflow_id
from tether_desk.models import Approval
from tether_desk.operations.liveness import beat
from tether_desk.operations.runs import attention_by_ticket, fail, list_runs, recover, retry
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[Desk]:
    db = Database(sqlite_url(tmp_path / "desk.db"))
    db.migrate()
    seed(db)
    yield Desk(db, DeskScriptedModel())
    db.dispose()


async def test_a_step_changed_without_a_version_bump_needs_attention_and_retries(
    desk: Desk,
) -> None:
    ticket = await stopped_after_its_step(desk)
    with sqlite3.connect(log_path(desk)) as c:  # the deployed code names step 1 otherwise
        c.execute(
            "UPDATE operation_outputs SET function_name = 'desk.claim_v0' "
            "WHERE workflow_uuid = ? AND function_id = 1",
            (workflow_id(ticket),),
        )
    runs = durable(desk)
    await runs.start()  # recovers the run: DBOS finds a step it does not expect
    try:
        rows: list = []

        def errored() -> bool:
            rows[:] = list_runs(runs.client, desk.db, "1")
            return any(r.state == "error" for r in rows)

        await until(errored)
        row = attention_by_ticket(rows)[ticket]
        assert row.workflow_id == workflow_id(ticket) and row.needs_attention
        assert "was recorded when" in row.error and "retry" in row.action
        said = await asyncio.to_thread(retry, runs.client, desk.db, row.workflow_id, "1")
        assert "re-run from step 1" in said
        await until(lambda: not list_runs(runs.client, desk.db, "1"))  # the run ended
        assert status(desk.db, ticket) == "awaiting_approval"  # its step stored nothing twice
        with desk.db.read_connection() as c:
            stored = c.scalars(select(Approval.status).where(Approval.ticket_id == ticket))
            assert list(stored) == ["pending"]
    finally:
        await runs.stop()


async def test_a_run_stranded_by_a_version_bump_is_rerun_under_the_new_one(desk: Desk) -> None:
    ticket = await stuck_in_triage(desk)
    runs = durable(desk, version="2")
    await runs.start()  # a new version: DBOS leaves version 1's runs alone
    try:
        rows = list_runs(runs.client, desk.db, "2")
        assert [(r.ticket_id, r.state) for r in rows] == [(ticket, "stranded")]
        assert "drain it with the old version" in rows[0].action
        await asyncio.sleep(0.5)
        assert status(desk.db, ticket) == "triaging"  # nothing runs it
        said = await asyncio.to_thread(retry, runs.client, desk.db, rows[0].workflow_id, "2")
        assert "under version 2" in said and "same run ids" in said
        await until(lambda: status(desk.db, ticket) == "awaiting_approval")
        approval = pending_approval(desk.db, ticket)
        assert approval is not None
        claimed = claim_decision(desk, approval.id, staff_id(desk.db), approve=True)
        await resume(desk, claimed)
        await until(lambda: status(desk.db, ticket) == "draft_ready")
        assert refunds_by_order(desk.db) == {"C-2210": 1200}
    finally:
        await runs.stop()


async def test_a_dead_executors_runs_show_and_are_recovered(desk: Desk) -> None:
    ticket = await stuck_in_triage(desk)  # executor "local" is gone
    beat(desk.db, "local", "1")  # ...its last heartbeat still fresh: refused
    runs = DurableDesk(desk, DurableSettings(executor_id="w-2", poll_seconds=0.05))
    await runs.start()
    try:
        with pytest.raises(Exception, match="is alive"):
            recover(runs.client, desk.db, ["local"], "1")
        from tether_desk.operations.liveness import forget

        forget(desk.db, "local")
        rows = list_runs(runs.client, desk.db, "1")
        assert [(r.ticket_id, r.state, r.executor_id) for r in rows] == [
            (ticket, "absent", "local")
        ]
        taken = recover(runs.client, desk.db, ["local"], "1")
        assert taken == [workflow_id(ticket)]
        await until(lambda: status(desk.db, ticket) == "awaiting_approval")
        # the approval waits for staff; no run waits with it
        await until(lambda: list_runs(runs.client, desk.db, "1") == [])
    finally:
        await runs.stop()


async def test_failing_a_run_hands_its_ticket_to_an_advisor(desk: Desk) -> None:
    ticket = await stuck_in_triage(desk)  # cut half way; its executor "local" is gone
    runs = DurableDesk(desk, DurableSettings(executor_id="w-2", poll_seconds=0.05))
    await runs.start()
    try:
        (row,) = list_runs(runs.client, desk.db, "1")
        assert (row.ticket_id, row.state) == (ticket, "absent")
        said = await asyncio.to_thread(fail, runs.client, desk.db, row.workflow_id, "1")
        assert "goes to an advisor" in said
        assert status(desk.db, ticket) == "failed"
        assert pending_approval(desk.db, ticket) is None  # the agent never proposed
        assert [r.state for r in list_runs(runs.client, desk.db, "1")] == ["cancelled"]
    finally:
        await runs.stop()
