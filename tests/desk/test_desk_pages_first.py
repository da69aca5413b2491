"""Pages before workflows (:mod:`tether_desk.priority`): the console counts its requests
in flight, and a durable step does not start while one is, until it ends or the step's
turn comes; the steps never starve."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from dbos import DBOS
from fastapi import Request
from fastapi.testclient import TestClient
from helpers import add_ticket, until_status

from tether_desk.durable import workflow_id
from tether_desk.pipeline import Desk
from tether_desk.priority import PagesFirst
from tether_desk.web.app import create_app
from tether_desk.web.pages import CountPages


async def settled(task: asyncio.Task[Any], rounds: int = 20) -> bool:
    """Whether ``task`` is done after the loop went round ``rounds`` times (and 50 ms)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    return task.done()


async def test_a_step_goes_at_once_while_no_page_is_in_flight() -> None:
    pages = PagesFirst(spacing=60, quiet=0.01)
    step = asyncio.create_task(pages.give_way())
    assert await settled(step, rounds=1)


async def test_a_step_waits_for_the_page_in_flight_to_end() -> None:
    pages = PagesFirst(spacing=60, quiet=0.01)  # its turn is a minute away
    pages.entered()
    step = asyncio.create_task(pages.give_way())
    assert not await settled(step)
    ended = threading.Thread(target=pages.left)  # the console's thread, not the step's
    ended.start()
    ended.join()
    await asyncio.wait_for(step, 5)
    assert pages.in_flight == 0


async def test_a_step_waits_while_any_page_is_in_flight() -> None:
    pages = PagesFirst(spacing=60, quiet=0.01)
    pages.entered()
    pages.entered()
    step = asyncio.create_task(pages.give_way())
    pages.left()
    assert not await settled(step)  # one page is still in flight
    pages.left()
    await asyncio.wait_for(step, 5)


async def test_a_step_waits_while_requests_keep_coming() -> None:
    pages = PagesFirst(spacing=60, quiet=1)
    pages.entered()
    pages.left()  # none in flight, but the next is likely on its way
    step = asyncio.create_task(pages.give_way())
    assert not await settled(step)
    await asyncio.wait_for(step, 5)  # a second without a request: the step goes


async def test_steps_take_turns_while_pages_never_end() -> None:
    pages = PagesFirst(spacing=0.01)
    pages.entered()  # never left: the steps must not starve
    started: list[int] = []

    async def step(n: int) -> None:
        await pages.give_way()
        started.append(n)

    await asyncio.wait_for(asyncio.gather(*(step(n) for n in range(5))), 5)
    assert started == [0, 1, 2, 3, 4]  # one at a time, in the order they came
    assert pages.in_flight == 1


async def test_a_new_busy_spell_owes_no_turn_to_the_last() -> None:
    pages = PagesFirst(spacing=60, quiet=0.01)
    pages.entered()
    first = asyncio.create_task(pages.give_way())  # its turn a minute away
    assert not await settled(first)
    pages.left()
    await asyncio.wait_for(first, 5)  # the pages went quiet: it went
    pages.spacing = 0.01
    pages.entered()
    await asyncio.wait_for(pages.give_way(), 5)  # not after the minute the first was owed


async def test_a_request_is_in_flight_until_its_response_starts() -> None:
    pages = PagesFirst()
    seen: list[int] = []
    go_on = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(pages.in_flight)
        await go_on.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen.append(pages.in_flight)  # a stream's body: no longer counted
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        return None

    counted = CountPages(app, pages)
    request = asyncio.create_task(counted({"type": "http"}, receive, send))
    await asyncio.sleep(0.01)
    assert pages.in_flight == 1
    go_on.set()
    await request
    assert seen == [1, 0] and pages.in_flight == 0


async def test_a_request_that_fails_is_no_longer_counted() -> None:
    pages = PagesFirst()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await CountPages(app, pages)({"type": "http"}, None, None)  # type: ignore[arg-type]
    assert pages.in_flight == 0


def test_the_console_counts_its_requests_on_the_desk(desk: Desk) -> None:
    app = create_app(desk, start_worker=False)
    seen: list[int] = []

    @app.get("/probe")
    def probe(request: Request) -> dict[str, int]:
        seen.append(desk.pages.in_flight)
        return {}

    with TestClient(app) as client:
        assert client.get("/probe").status_code == 200
    assert seen == [1] and desk.pages.in_flight == 0


async def test_a_durable_ticket_waits_for_the_page_then_runs(durable: Desk) -> None:
    pages, db, runs = durable.pages, durable.db, durable.runs
    assert runs is not None
    pages.spacing, pages.quiet = 60, 0.01
    pages.entered()  # a page in flight, its end a minute away
    try:
        tid = add_ticket(db, "Mon colis est arrive abime, je demande 15 EUR.")
        await runs.submit_new()
        for _ in range(200):  # the queue handed the ticket's workflow to this process
            status = await DBOS.get_workflow_status_async(workflow_id(tid))
            if status is not None and status.status == "PENDING":
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        assert await until_status(db, tid, "new", "triaging") == "new"  # its step did not start
    finally:
        pages.left()
    assert await until_status(db, tid, "awaiting_approval") == "awaiting_approval"


async def test_a_durable_ticket_runs_while_pages_never_end(durable: Desk) -> None:
    pages, db, runs = durable.pages, durable.db, durable.runs
    assert runs is not None
    pages.spacing, pages.quiet = 0.05, 0.01
    pages.entered()  # pages in flight all along: the step's turn still comes
    try:
        tid = add_ticket(db, "Mon colis est arrive abime, je demande 15 EUR.")
        await runs.submit_new()
        assert await until_status(db, tid, "awaiting_approval") == "awaiting_approval"
        assert pages.in_flight == 1
    finally:
        pages.left()
