"""The inbox's count and pages: counts kept exact by the database's triggers whatever
writes the tickets, keyset pages that walk every ticket once, and the same on PostgreSQL."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from helpers import customer_id
from sqlalchemy import delete, func, select, text, update

from tether_desk.db import Database, sqlite_url
from tether_desk.models import Ticket, TicketCount
from tether_desk.tickets import PAGE_SIZE, customer_tickets, inbox, open_ticket

MARIE = "marie.dupont@client.example"
STATUSES = ("new", "triaging", "answered", "awaiting_approval", "draft_ready", "needs_human")


def counted(db: Database) -> dict[str, int]:
    with db.read() as s:
        rows = s.execute(select(TicketCount.status, TicketCount.n)).all()
    return {status: n for status, n in rows if n}


def actual(db: Database) -> dict[str, int]:
    with db.read() as s:
        rows = s.execute(select(Ticket.status, func.count()).group_by(Ticket.status)).all()
    return {status: n for status, n in rows}


def churn(db: Database, seed: int) -> None:
    """Inserts, status changes (some to the same status), other updates and deletes, in
    SQL that bypasses the desk's services."""
    rng = random.Random(seed)
    cid = customer_id(db, MARIE)
    for i in range(40):
        open_ticket(db, cid, "C-1042", f"t{i}", "body")
    with db.write() as s:
        ids = list(s.scalars(select(Ticket.id)))
        for tid in rng.sample(ids, 30):
            s.execute(update(Ticket).where(Ticket.id == tid).values(status=rng.choice(STATUSES)))
        s.execute(update(Ticket).where(Ticket.id == ids[0]).values(subject="renamed"))
        s.execute(update(Ticket).values(category="other"))  # no status change at all
        s.execute(delete(Ticket).where(Ticket.id.in_(rng.sample(ids, 5))))


def test_counts_stay_exact_whatever_writes_the_tickets(db: Database) -> None:
    assert counted(db) == actual(db) == {"new": 4}  # the seed, counted by the migration
    churn(db, 1)
    assert counted(db) == actual(db)
    assert inbox(db).total == sum(actual(db).values())
    for status, n in actual(db).items():
        assert inbox(db, status=status).total == n


def test_a_rolled_back_change_leaves_the_counts_alone(db: Database) -> None:
    before = counted(db)

    def change_then_fail() -> None:
        with db.write() as s:
            s.execute(update(Ticket).values(status="answered"))
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        change_then_fail()
    assert counted(db) == before == actual(db)


def test_upgrading_a_database_counts_its_tickets(tmp_path: Path) -> None:
    from alembic import command
    from alembic.config import Config

    from tether_desk.db import MIGRATIONS

    db = Database(sqlite_url(f"{tmp_path}/old.db"))
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with db.engine.begin() as c:
        config.attributes["connection"] = c
        command.upgrade(config, "0001")
        c.execute(text("INSERT INTO customers (email, name, password_hash) VALUES ('a', 'A', 'x')"))
        c.execute(
            text(
                "INSERT INTO orders (number, customer_id, status, amount_paid_cents, currency, "
                "shipping_address, payment_method, created_at) "
                "VALUES ('C-1000', 1, 'shipped', 100, 'EUR', 'x', 'x', '2026-01-01')"
            )
        )
        for status in ("new", "new", "answered"):
            c.execute(
                text(
                    "INSERT INTO tickets (customer_id, order_id, subject, body, status, "
                    "created_at, updated_at) VALUES (1, 1, 's', 'b', :st, '2026-01-01', "
                    "'2026-01-01')"
                ),
                {"st": status},
            )
    db.migrate()
    assert counted(db) == {"new": 2, "answered": 1}
    db.dispose()


def walk(db: Database, status: str | None = None) -> list[int]:
    """Every ticket id, following the pager's older links from page 1."""
    page = inbox(db, 1, status)
    seen = [r.id for r in page.rows]
    while page.older is not None:
        page = inbox(db, page.page + 1, status, before=page.older)
        seen += [r.id for r in page.rows]
    return seen


def test_keyset_pages_walk_every_ticket_once_newest_first(db: Database) -> None:
    churn(db, 2)
    for status in (None, "answered"):
        assert walk(db, status) == sorted(ids(db, status), reverse=True)
    first = inbox(db, 1)
    second = inbox(db, 2, before=first.older)
    assert second.rows == inbox(db, 2).rows  # keyset and offset agree
    back = inbox(db, 1, after=second.newer)
    assert back.rows == first.rows and back.newer is None
    assert first.pages == -(-first.total // PAGE_SIZE)


def ids(db: Database, status: str | None) -> list[int]:
    with db.read() as s:
        q = select(Ticket.id)
        if status:
            q = q.where(Ticket.status == status)
        return list(s.scalars(q))


def test_new_tickets_do_not_shift_a_keyset_page(db: Database) -> None:
    cid = customer_id(db, MARIE)
    for i in range(60):
        open_ticket(db, cid, "C-1042", f"t{i}", "body")
    first = inbox(db, 1)
    second = inbox(db, 2, before=first.older)
    for i in range(7):
        open_ticket(db, cid, "C-1042", f"late{i}", "body")
    assert inbox(db, 2, before=first.older).rows == second.rows  # the same tickets
    assert inbox(db, 2).rows != second.rows  # by offset they moved by seven


def test_a_customer_pages_through_only_their_tickets(db: Database) -> None:
    cid = customer_id(db, MARIE)
    for i in range(30):
        open_ticket(db, cid, "C-1042", f"t{i}", "body")
    page = customer_tickets(db, cid)
    ids = [r.id for r in page.rows]
    while page.older is not None:
        page = customer_tickets(db, cid, page.page + 1, before=page.older)
        ids += [r.id for r in page.rows]
    assert len(ids) == len(set(ids)) == page.total == 32  # the seed gave Marie two
    assert {r.customer for r in customer_tickets(db, cid).rows} == {"Marie Dupont"}


def test_counts_and_pages_on_postgresql(pg_db: Database) -> None:
    assert counted(pg_db) == actual(pg_db) == {"new": 4}
    churn(pg_db, 3)
    assert counted(pg_db) == actual(pg_db)
    assert walk(pg_db) == sorted(ids(pg_db, None), reverse=True)
    assert inbox(pg_db).total == sum(actual(pg_db).values())
