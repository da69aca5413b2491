"""The Runs page in Chromium, on ``tether serve``: a run stranded by a version change and
one waiting for approval; the operator retries the stranded one and it waits for its
approval under the new version. With DESK_SCREENSHOTS set, it saves docs' screenshot."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from browsing import log_in, shot
from desk_server import serve
from durable_ops import wait_under
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
    setup = wait_under(Desk(db, DeskScriptedModel()), "0", [stranded])
    with ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread
        pool.submit(asyncio.run, setup).result()
    set_operator(db, "camille@desk.example")
    with serve(str(path)) as served:
        page = log_in(browser, served.url, "camille@desk.example", "camille-demo")
        page.goto(f"{served.url}/staff/operations/runs")
        waiting = page.locator(".runs-waiting .run-row")
        expect(waiting).to_have_count(1, timeout=30_000)  # the injected ticket, version 1
        row = page.locator(".runs-stranded .run-row")
        expect(row).to_have_count(1)
        expect(row).to_contain_text(f"#{stranded}")
        shot(page, "runs")
        page.goto(f"{served.url}/staff/tickets/{stranded}")
        expect(page.locator("#ticket-status")).to_have_text("needs attention")
        page.goto(f"{served.url}/staff/operations/runs")
        page.locator(".runs-stranded button", has_text="Retry").click()
        expect(page.locator(".notice")).to_contain_text("under version 1")
        for _ in range(60):  # the page shows the runs as they were when it was drawn
            page.wait_for_timeout(500)
            page.reload()
            if page.locator(".runs-waiting .run-row").count() == 2:
                break
        expect(page.locator(".runs-waiting .run-row")).to_have_count(2)
        expect(page.locator(".runs-stranded")).to_have_count(0)
    db.dispose()
