"""The Runs page in Chromium, on ``tether serve``: a run stranded half way by a version
change; the operator retries it and it goes on to its approval under the new version (an
approval that waits holds no run). With DESK_SCREENSHOTS set, it saves docs' screenshot."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from browsing import log_in, shot
from desk_server import serve
from durable_ops import status, stuck_in_triage
from helpers import ticket_id_by_order
from playwright.sync_api import Browser, expect

from tether_desk.db import Database, sqlite_url
from tether_desk.operations.roles import set_operator
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed


def test_an_operator_sees_and_retries_a_stranded_run(browser: Browser, tmp_path: Path) -> None:
    path = tmp_path / "desk.db"
    db = Database(sqlite_url(path))
    db.migrate()
    seed(db)
    stranded = ticket_id_by_order(db, "C-2210")
    setup = stuck_in_triage(Desk(db, DeskScriptedModel()), version="0")
    with ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread
        pool.submit(asyncio.run, setup).result()
    set_operator(db, "camille@desk.example")
    with serve(str(path)) as served:
        page = log_in(browser, served.url, "camille@desk.example", "camille-demo")
        page.goto(f"{served.url}/staff/operations/runs")
        row = page.locator(".runs-stranded .run-row")
        expect(row).to_have_count(1, timeout=30_000)
        expect(row).to_contain_text(f"#{stranded}")
        shot(page, "runs")
        page.goto(f"{served.url}/staff/tickets/{stranded}")
        expect(page.locator("#ticket-status")).to_have_text("needs attention")
        page.goto(f"{served.url}/staff/operations/runs")
        page.locator(".runs-stranded button", has_text="Retry").click()
        expect(page.locator(".notice")).to_contain_text("under version 1")
        for _ in range(60):
            page.wait_for_timeout(500)
            if status(db, stranded) == "awaiting_approval":
                break
        page.reload()  # the page shows the runs as they were when it was drawn
        expect(page.locator(".runs-stranded")).to_have_count(0)
        page.goto(f"{served.url}/staff/tickets/{stranded}")
        expect(page.locator("#ticket-status")).not_to_have_text("needs attention")
        assert status(db, stranded) == "awaiting_approval"
    db.dispose()
