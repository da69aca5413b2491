"""The console's runs page for operators, on a durable SQLite desk whose version was
raised under a run cut half way: the run shows as stranded and its ticket as needing
attention, a retry under the new version takes it to its approval, and the decision goes
through once. An approval that waits holds no run: a version change strands none."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from durable_ops import status, stuck_in_triage
from helpers import pending_approval, refunds_by_order, ticket_id_by_order
from starlette.testclient import TestClient
from webclient import login, wait_for

from tether_desk.db import Database, sqlite_url
from tether_desk.durable import DurableDesk, DurableSettings
from tether_desk.operations.roles import set_operator
from tether_desk.operations.runs import list_runs
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed
from tether_desk.web.app import create_app


@pytest.fixture
def upgraded(tmp_path: Path) -> Iterator[tuple[Desk, int]]:
    db = Database(sqlite_url(tmp_path / "desk.db"))
    db.migrate()
    seed(db)
    desk = Desk(db, DeskScriptedModel())
    ticket = ticket_id_by_order(db, "C-2210")
    assert asyncio.run(stuck_in_triage(desk)) == ticket  # cut under version 1
    DurableDesk(desk, DurableSettings(poll_seconds=0.05, application_version="2"))
    yield desk, ticket
    db.dispose()


def test_a_stranded_run_is_shown_retried_then_decided(upgraded: tuple[Desk, int]) -> None:
    desk, ticket = upgraded
    with TestClient(create_app(desk)) as client:
        csrf = login(client, "staff")
        assert client.get("/staff/operations/runs").status_code == 403  # not an operator
        set_operator(desk.db, "camille@desk.example")
        page = client.get("/staff/operations/runs").text
        assert "stranded by a version change (1)" in page and f"#{ticket}" in page
        assert "drain it with the old version" in page
        assert "needs attention" in client.get(f"/staff/tickets/{ticket}").text
        assert "needs attention" in client.get("/staff/inbox").text

        wid = re.search(r"<code>(desk-ticket-[^<]+)</code>", page)
        assert wid is not None
        done = client.post(
            "/staff/operations/runs/retry",
            data={"workflow_id": wid.group(1), "csrftoken": csrf},
            follow_redirects=True,
        )
        assert done.status_code == 200 and "under version 2" in done.text
        wait_for(lambda: status(desk.db, ticket) == "awaiting_approval", 60)
        assert "needs attention" not in client.get(f"/staff/tickets/{ticket}").text
        # the approval waits for staff; no run waits with it (the run ends just after the
        # step that stored the approval is logged)
        wait_for(lambda: list_runs(desk.runs.client, desk.db, "2") == [], 60)  # type: ignore[union-attr]

        approval = pending_approval(desk.db, ticket)
        assert approval is not None
        form = {  # what the approval screen's form sends
            "decision": "approve",
            "arguments_hash": approval.arguments_hash,
            "csrftoken": csrf,
        }
        accepted = client.post(f"/staff/approvals/{approval.id}", data=form)
        assert accepted.status_code == 200, accepted.text
        wait_for(lambda: status(desk.db, ticket) == "draft_ready", 60)
        again = client.post(f"/staff/approvals/{approval.id}", data=form)
        assert again.status_code == 409  # decided once
    assert refunds_by_order(desk.db) == {"C-2210": 1200}


def test_a_dead_workers_run_is_shown_and_recovered_from_the_console(tmp_path: Path) -> None:
    db = Database(sqlite_url(tmp_path / "desk.db"))
    db.migrate()
    seed(db)
    desk = Desk(db, DeskScriptedModel())
    ticket = asyncio.run(stuck_in_triage(desk))  # its executor "local" is gone
    DurableDesk(desk, DurableSettings(executor_id="w-2", poll_seconds=0.05))
    set_operator(db, "camille@desk.example")
    with TestClient(create_app(desk)) as client:
        csrf = login(client, "staff")
        page = client.get("/staff/operations/runs").text
        assert "pending on a stopped or dead worker (1)" in page and f"#{ticket}" in page
        assert "Recover all of local" in page
        assert "needs attention" in client.get(f"/staff/tickets/{ticket}").text
        done = client.post(
            "/staff/operations/runs/recover",
            data={"executor_id": "local", "csrftoken": csrf},
            follow_redirects=True,
        )
        assert "handed 1 run(s) of local to the live workers" in done.text
        wait_for(lambda: status(desk.db, ticket) == "awaiting_approval", 60)
    db.dispose()
