"""The upgrade runbook of docs/durable.md, end to end on SQLite and PostgreSQL: two tickets'
runs are cut half way under version 0 when the code moves to version 1. The new process
says so in one line at start; one run is drained with the old code, the other retried
under the new version; both refunds are made once. An approval waiting for staff holds no
run, so a version change strands none: the decision starts its run's finish under the
version of the console that takes it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from dbos import DBOS
from durable_ops import status, stop_at, until, worker_start_up
from helpers import pending_approval, refunds_by_order, staff_id, ticket_id_by_order
from sqlalchemy import update
from typer.testing import CliRunner

from tether_desk.db import Database
from tether_desk.decisions import claim_decision, resume
from tether_desk.durable import DurableDesk, DurableSettings
from tether_desk.durable.flow import finish_id
from tether_desk.models import Ticket
from tether_desk.money import format_cents
from tether_desk.operations.runs_cli import runs_app
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed


async def cut_under(desk: Desk, version: str, executor: str, ticket: int) -> None:
    """Run ``ticket`` under ``version`` on ``executor`` until its triage is logged, then
    stop DBOS there (its workflow stays pending under that version)."""
    await stop_at(desk, ticket, "model.before:1", "triaging", version=version, executor_id=executor)


async def finish_on(desk: Desk, version: str, executor: str, ticket: int) -> None:
    """A process of ``version`` on ``executor`` takes ``ticket`` to its approval, which
    staff approve, then to its draft."""
    settings = DurableSettings(executor_id=executor, poll_seconds=0.05, application_version=version)
    runs = DurableDesk(desk, settings)
    await runs.start()
    try:
        await until(lambda: pending_approval(desk.db, ticket) is not None)
        approval = pending_approval(desk.db, ticket)
        assert approval is not None
        typed = format_cents(approval.amount_cents)
        claimed = claim_decision(
            desk, approval.id, staff_id(desk.db), approve=True, typed_amount=typed
        )
        await resume(desk, claimed)
        await until(lambda: status(desk.db, ticket) == "draft_ready")
        finish = finish_id(approval.run_id, approval.call_id)  # its workflow ends too
        for _ in range(1200):
            found = await DBOS.get_workflow_status_async(finish)
            if found is not None and found.status == "SUCCESS":
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"{finish} did not end")
    finally:
        await runs.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def desk_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "desk.db")
    url: str = request.getfixturevalue("pg_url")
    return url


def test_the_upgrade_runbook_drains_one_run_and_retries_the_other(desk_url: str) -> None:
    db = Database(desk_url)
    db.migrate()
    seed(db)
    desk = Desk(db, DeskScriptedModel())
    drained = ticket_id_by_order(db, "C-2210")
    retried = ticket_id_by_order(db, "C-1042")
    asyncio.run(cut_under(desk, "0", "old-a", drained))
    asyncio.run(cut_under(desk, "0", "old-b", retried))
    # the seed's other new tickets stay out of the queue: the worker below takes a ticket
    # as soon as it queues one, and is stopped as soon as it takes tickets (a run it took
    # would wait, pending, for its next start)
    with db.write() as s:
        s.execute(update(Ticket).where(Ticket.status == "new").values(status="needs_human"))

    # 1. the new version starts and says what waits
    code, out = worker_start_up("w-1", desk_url)
    assert code == 0, out
    said = [line for line in out.splitlines() if line.startswith("upgrade:")]
    assert len(said) == 1, out
    assert "2 of version 0" in said[0] and "this is version 1" in said[0]
    assert "tether runs retry --stranded" in said[0]

    # 2. drain: the old code, on the executor that left the run, finishes it
    asyncio.run(finish_on(desk, "0", "old-a", drained))

    # 3. retry: the rest is marked for a re-run under the new version
    listed = CliRunner().invoke(runs_app, ["list", "--db", desk_url])
    assert listed.exit_code == 0, listed.output
    assert "stranded by a version change" in listed.output and f"ticket {retried}" in listed.output
    result = CliRunner().invoke(runs_app, ["retry", "--stranded", "--db", desk_url])
    assert result.exit_code == 0, result.output
    assert result.output.count("under version 1") == 1, result.output
    asyncio.run(finish_on(desk, "1", "local", retried))

    listed = CliRunner().invoke(runs_app, ["list", "--db", desk_url])
    assert "no runs in progress." in listed.output, listed.output
    assert refunds_by_order(db) == {"C-2210": 1200, "C-1042": 8990}
    db.dispose()
