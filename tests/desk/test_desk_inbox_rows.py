"""The inbox's rows, kept rendered between pages: a row shows its ticket as it is now
(status, assignee, subject, attention), and the ticket's text stays escaped."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from helpers import staff_id
from sqlalchemy import update
from starlette.testclient import TestClient
from test_desk_inbox_queries import add_tickets
from webclient import login

from tether_desk.assignment import assign
from tether_desk.models import Ticket
from tether_desk.operations.runs import RunRow
from tether_desk.pipeline import Desk
from tether_desk.web.app import create_app

BASE = "http://127.0.0.1"


@pytest.fixture
def client(desk: Desk) -> Iterator[TestClient]:
    with TestClient(create_app(desk, start_worker=False), base_url=BASE) as c:
        yield c


def row_of(html: str, ticket_id: int) -> str:
    found = re.search(rf'<tr class="[^"]*"><td>{ticket_id}</td>.*?</tr>', html)
    assert found is not None, html
    return found.group(0)


def test_a_row_shows_its_ticket_as_it_is_now(desk: Desk, client: TestClient) -> None:
    (tid,) = add_tickets(desk.db, 1)
    login(client, "staff")
    before = row_of(client.get("/staff/inbox").text, tid)
    assert "with an advisor" in before and "Colis 0" in before
    assert client.get("/staff/inbox").text.count(before) == 1  # the same row, kept
    with desk.db.write() as s:
        s.execute(
            update(Ticket)
            .where(Ticket.id == tid)
            .values(status="answered", subject="<script>alert(1)</script>")
        )
    assign(desk.db, tid, staff_id(desk.db))
    after = row_of(client.get("/staff/inbox").text, tid)
    assert after != before
    assert 'class="st-answered"' in after and ">answered<" in after
    assert "Camille (support)" in after
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in after and "<script>" not in after


def test_a_row_says_when_its_run_needs_attention(
    desk: Desk, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tid,) = add_tickets(desk.db, 1)
    login(client, "staff")
    assert "needs attention" not in row_of(client.get("/staff/inbox").text, tid)
    stuck = {tid: RunRow.__new__(RunRow)}

    async def needing(_desk: Desk) -> dict[int, RunRow]:
        return stuck

    monkeypatch.setattr("tether_desk.web.staff.attention_for_page", needing)
    assert "needs attention" in row_of(client.get("/staff/inbox").text, tid)
