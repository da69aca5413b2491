"""The staff inbox's and search's reads: a page costs the same few statements however
many rows it shows, every filter pages by keyset and by number, search takes hostile
text as plain words, and the runs needing attention are read once however many pages
ask at the same time."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from helpers import staff_id
from sqlalchemy import delete, event, insert, select, update
from starlette.testclient import TestClient
from webclient import login

from tether_desk.assignment import assign
from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.inbox import inbox_page
from tether_desk.models import Order, Ticket
from tether_desk.operations import attention
from tether_desk.operations.runs import RunRow
from tether_desk.pipeline import Desk
from tether_desk.search import MAX_WORDS, search, words
from tether_desk.tickets import PAGE_SIZE
from tether_desk.web.app import create_app

BASE = "http://127.0.0.1"


def add_tickets(db: Database, n: int, status: str = "needs_human") -> list[int]:
    """``n`` tickets of one customer, oldest first; ticket i's text says ``ref<i>``."""
    with db.write() as s:
        order_id, customer = s.execute(select(Order.id, Order.customer_id).limit(1)).one()
        first = int(s.scalar(select(Ticket.id).order_by(Ticket.id.desc()).limit(1)) or 0)
        s.execute(
            insert(Ticket),
            [
                {
                    "customer_id": customer,
                    "order_id": order_id,
                    "subject": f"Colis {i}",
                    "body": f"Ma commande ref{i} n'est pas arrivée.",
                    "status": status,
                }
                for i in range(n)
            ],
        )
        return list(s.scalars(select(Ticket.id).where(Ticket.id > first).order_by(Ticket.id)))


@pytest.fixture
def client(desk: Desk) -> Iterator[TestClient]:
    with TestClient(create_app(desk, start_worker=False), base_url=BASE) as c:
        yield c


def statements(db: Database) -> list[str]:
    seen: list[str] = []

    def count(*args: Any) -> None:
        seen.append(args[2])

    event.listen(db.engine, "before_cursor_execute", count)
    return seen


def test_an_inbox_page_is_one_statement_whatever_its_rows(desk: Desk, client: TestClient) -> None:
    add_tickets(desk.db, 3 * PAGE_SIZE)
    ids = add_tickets(desk.db, 2)
    assign(desk.db, ids[-1], staff_id(desk.db))
    login(client, "staff")
    seen = statements(desk.db)
    for path in (
        "/staff/inbox",
        "/staff/inbox?page=2",
        f"/staff/inbox?before={ids[0]}",
        "/staff/inbox?assigned=none&status=needs_human",
        "/staff/inbox?assigned=me",
    ):
        seen.clear()
        r = client.get(path)
        assert r.status_code == 200
        # the page (rows, order, customer, assignee, waiting, count); the session was
        # read at login and is kept for a few seconds (WebSettings.session_recheck)
        assert len(seen) == 1, (path, seen)
    assert "Camille (support)" in client.get("/staff/inbox?assigned=me").text


def test_every_filter_pages_by_keyset_and_by_number(db: Database) -> None:
    ids = add_tickets(db, 60)
    nora = staff_id(db)
    mine = ids[::2]
    for t in mine:
        assign(db, t, nora)
    newest = sorted(mine, reverse=True)
    first = inbox_page(db, 1, assignee=nora)
    assert [r.id for r in first.page.rows] == newest[:PAGE_SIZE]
    assert first.page.total == len(mine) and first.page.pages == 2
    assert first.page.older == newest[PAGE_SIZE - 1] and first.page.newer is None
    second = inbox_page(db, 2, assignee=nora, before=first.page.older)
    assert [r.id for r in second.page.rows] == newest[PAGE_SIZE:]
    assert second.page.rows == inbox_page(db, 2, assignee=nora).page.rows
    back = inbox_page(db, 1, assignee=nora, after=second.page.newer)
    assert back.page.rows == first.page.rows
    assert inbox_page(db, 99, assignee=nora).page.rows == second.page.rows  # past the end
    unassigned = inbox_page(db, 1, assignee=None, status="needs_human")
    assert unassigned.page.total == len(ids) - len(mine)
    assert not set(r.id for r in unassigned.page.rows) & set(mine)
    assert all(r.status == "needs_human" for r in unassigned.page.rows)
    assert inbox_page(db, 1, status="no-such-status").page.rows == []


def test_rows_carry_their_assignee_and_how_long_the_customer_waits(db: Database) -> None:
    late, fresh, done = add_tickets(db, 3)
    assign(db, late, staff_id(db))
    with db.write() as s:
        s.execute(update(Ticket).where(Ticket.id == done).values(status="answered"))
    from tether_desk.models import Message

    with db.write() as s:
        s.execute(
            update(Message)
            .where(Message.ticket_id == late)
            .values(created_at=utcnow() - timedelta(hours=5, minutes=3))
        )
    got = inbox_page(db, 1, wait_target=timedelta(hours=4))
    assert got.owners == {late: "Camille (support)"}
    assert got.waits[late].late and got.waits[late].words == "5 h 03"
    assert not got.waits[fresh].late and got.waits[fresh].words == "0 min"
    assert done not in got.waits  # answered: nobody waits


HOSTILE = [
    '"',
    "'",
    '""""',
    "NEAR(a b)",
    "body: commande",
    "subject:colis OR 1=1",
    "a AND NOT b",
    "^commande*",
    "(((((",
    "colis -commande",
    "commande\x00\x1f",
    "';DROP TABLE tickets;--",
    "ref1 & ! | <-> :* ref2",
    "_ __ a_b",
    "\u202e\ufeff",
]


def _hostile_queries(db: Database) -> None:
    ids = add_tickets(db, 30)
    for q in HOSTILE:
        search(db, q)  # never an error: only words reach the query language
    assert [h.ticket_id for h in search(db, '"ref7" OR NEAR(*')] == []  # "or", "near": words
    assert [h.ticket_id for h in search(db, 'ref7"')] == [ids[7]]
    assert [h.ticket_id for h in search(db, "ref1_7")] == []  # ref1 and 7: no ticket holds "7"
    long = "ref12 " + '"*(:^' * 2_000  # 10 kB of query syntax after one word
    assert [h.ticket_id for h in search(db, long)] == [ids[12]]
    assert len(words("a " * 10_000)) == MAX_WORDS
    assert words("x" * 20_000 + " ref1") == ["x" * 1_000]  # only the query's start is read


def test_hostile_queries_on_sqlite(db: Database) -> None:
    _hostile_queries(db)


def test_hostile_queries_on_postgresql(pg_db: Database) -> None:
    _hostile_queries(pg_db)


def test_a_one_letter_word_is_not_a_prefix(db: Database) -> None:
    from tether_desk.thread import add_note

    one, other = add_tickets(db, 2)
    add_note(db, one, staff_id(db), "Colis numero x ouvert.")
    add_note(db, other, staff_id(db), "Un xylophone dans le colis.")
    assert {h.ticket_id for h in search(db, "x")} == {one}
    assert {h.ticket_id for h in search(db, "xy")} == {other}
    assert {h.ticket_id for h in search(db, "ouv x")} == {one}


def test_a_hostile_search_page_answers_with_its_words(desk: Desk, client: TestClient) -> None:
    ids = add_tickets(desk.db, 5)
    login(client, "staff")
    r = client.get("/staff/search", params={"q": "ref3 " + '"*(' * 3000})
    assert r.status_code == 200 and f'href="/staff/tickets/{ids[3]}"' in r.text
    assert r.text.count('"*(') <= 70  # the query shown is cut
    assert client.get("/staff/search", params={"q": "x" * 10_001}).status_code == 422


class _Runs:
    _client = object()


def test_pages_asking_at_once_share_one_read_of_the_runs(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    desk = Desk(db, None)  # type: ignore[arg-type]
    desk.runs = _Runs()  # type: ignore[assignment]
    reads: list[str] = []
    now = utcnow()
    row = RunRow("desk-ticket-7", "ticket", 7, "error", "ERROR", "local", "1", now, now, "boom")
    gate = threading.Event()

    def list_runs(*args: Any) -> list[RunRow]:
        reads.append(threading.current_thread().name)
        gate.wait(5)
        return [row]

    monkeypatch.setattr(attention, "list_runs", list_runs)
    attention.forget_cache(desk)

    async def pages() -> list[dict[int, RunRow]]:
        asking = [asyncio.create_task(attention.attention_for_page(desk)) for _ in range(20)]
        await asyncio.sleep(0.1)
        assert not any(t.done() for t in asking)  # nothing listed yet: they wait for it
        gate.set()
        return await asyncio.gather(*asking)

    assert all(got == {7: row} for got in asyncio.run(pages()))
    assert len(reads) == 1 and reads[0] != threading.main_thread().name

    async def later() -> tuple[dict[int, RunRow], float]:
        gate.clear()
        attention._cache[id(desk)] = (time.monotonic() - attention.CACHE_SECONDS - 1, [row])
        t0 = time.perf_counter()
        got = await attention.attention_for_page(desk)  # stale: shown, refreshed behind
        waited = time.perf_counter() - t0
        gate.set()
        await asyncio.sleep(0.2)
        return got, waited

    got, waited = asyncio.run(later())
    assert got == {7: row} and waited < 1 and len(reads) == 2
    attention.forget_cache(desk)


def _alembic(db: Database, action: str, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    from tether_desk.db import MIGRATIONS

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with db.engine.begin() as connection:
        config.attributes["connection"] = connection
        getattr(command, action)(config, revision)


def test_search_vectors_migrate_down_and_up_on_postgresql(pg_db: Database) -> None:
    (tid,) = add_tickets(pg_db, 1)
    _alembic(pg_db, "downgrade", "0004")
    with pg_db.engine.connect() as c:
        columns = c.exec_driver_sql(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'messages'"
        ).scalars()
        assert "search" not in set(columns)
        indexes = c.exec_driver_sql("SELECT indexname FROM pg_indexes").scalars()
        assert {"ix_messages_fts", "ix_tickets_fts"} <= set(indexes)  # 0004's are back
    _alembic(pg_db, "upgrade", "head")
    assert [h.ticket_id for h in search(pg_db, "ref0")] == [tid]  # filled for older rows


def test_durable_tickets_go_on_while_the_consoles_loop_is_busy(tmp_path: Any) -> None:
    """Launched from the console's running loop, DBOS runs the workflows on its own loop:
    a ticket is processed while a page holds the console's loop the whole time."""
    from helpers import ticket, ticket_id_by_order

    from tether_desk.db import sqlite_url
    from tether_desk.durable import DurableDesk, DurableSettings
    from tether_desk.scripted import DeskScriptedModel
    from tether_desk.seed import seed

    db = Database(sqlite_url(tmp_path / "desk.db"))
    db.migrate()
    seed(db)
    desk = Desk(db, DeskScriptedModel())
    runs = DurableDesk(desk, DurableSettings(poll_seconds=0.05, wait_poll_seconds=0.05))
    tid = ticket_id_by_order(db, "C-1187")  # tracking: answered by code

    async def console() -> str:
        await runs.start()
        try:
            await runs.submit(tid)
            deadline = time.monotonic() + 60
            while ticket(db, tid).status != "answered" and time.monotonic() < deadline:
                time.sleep(0.05)  # noqa: ASYNC251 (a page that never yields to the loop)
            return ticket(db, tid).status
        finally:
            await runs.stop()

    try:
        assert asyncio.run(console()) == "answered"
    finally:
        db.dispose()


def _by_offset(db: Database, page: int) -> list[int]:
    """The ids of page ``page`` of all tickets, stepped over one by one."""
    with db.read() as s:
        newest = select(Ticket.id).order_by(Ticket.id.desc())
        return list(s.scalars(newest.limit(PAGE_SIZE).offset((page - 1) * PAGE_SIZE)))


@pytest.mark.parametrize("gaps", [(), (7,), (0, 30, 59)])
def test_a_numbered_page_of_all_tickets_is_the_same_with_or_without_gaps(
    db: Database, gaps: tuple[int, ...]
) -> None:
    """While the ids have no gap a numbered page starts at an id worked out from the
    count; with one (a ticket deleted) it is found by stepping: the same pages either way."""
    ids = add_tickets(db, 3 * PAGE_SIZE - 5)
    with db.write() as s:
        for i in gaps:
            s.execute(delete(Ticket).where(Ticket.id == ids[i]))
    for page in (1, 2, 3):
        found = inbox_page(db, page).page
        assert [r.id for r in found.rows] == _by_offset(db, page), (gaps, page)
        assert found.total == len(_by_offset(db, 1)) + len(_by_offset(db, 2)) + len(
            _by_offset(db, 3)
        )
    assert [r.id for r in inbox_page(db, 9).page.rows] == _by_offset(db, 3)  # past the end
