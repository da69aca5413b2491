"""Opening tickets: only on one's own orders, exact ASCII order numbers, bounded text."""

from __future__ import annotations

import pytest
from helpers import customer_id
from sqlalchemy import func, select

from tether_desk.db import Database
from tether_desk.errors import InvalidInput, NotFound
from tether_desk.models import Ticket
from tether_desk.orders import check_number
from tether_desk.tickets import MAX_BODY, customer_ticket, customer_tickets, inbox, open_ticket

MARIE = "marie.dupont@client.example"
PAUL = "paul.martin@client.example"


def count(db: Database) -> int:
    with db.read() as s:
        return int(s.scalar(select(func.count(Ticket.id))) or 0)


def test_a_customer_opens_a_ticket_on_their_own_order(db: Database) -> None:
    tid = open_ticket(db, customer_id(db, MARIE), "C-1042", "Colis", "Il est abime.")
    assert customer_ticket(db, customer_id(db, MARIE), tid).subject == "Colis"


def test_not_on_someone_elses_order(db: Database) -> None:
    before = count(db)
    with pytest.raises(NotFound, match="no order C-2210"):
        open_ticket(db, customer_id(db, MARIE), "C-2210", "x", "y")
    with pytest.raises(NotFound, match="no order C-9999"):  # the same answer as a missing one
        open_ticket(db, customer_id(db, MARIE), "C-9999", "x", "y")
    assert count(db) == before


@pytest.mark.parametrize(
    "number",
    [
        "\u0421-1042",  # Cyrillic
        "C\u20101042",  # Unicode hyphen
        "C-10\u200b42",  # zero-width
        "C-1042\u200d",
        "C-\uff11\uff10\uff14\uff12",  # full-width digits
        "C-\u0661\u0660\u0664\u0662",  # Arabic-Indic digits
        "c-1042",
        " C-1042",
        "C-1042 ",
        "C-10421",
    ],
)
def test_homoglyph_and_zero_width_order_numbers_reach_nothing(db: Database, number: str) -> None:
    before = count(db)
    with pytest.raises(InvalidInput):
        open_ticket(db, customer_id(db, MARIE), number, "x", "y")
    with pytest.raises(InvalidInput):
        check_number(number)
    assert count(db) == before


def test_a_one_megabyte_ticket_is_refused_with_a_clear_error(db: Database) -> None:
    before = count(db)
    with pytest.raises(InvalidInput, match=f"keep it under {MAX_BODY:,}"):
        open_ticket(db, customer_id(db, MARIE), "C-1042", "x", "a" * 1_000_000)
    assert count(db) == before


def test_control_characters_are_removed_and_empty_text_refused(db: Database) -> None:
    cid = customer_id(db, MARIE)
    tid = open_ticket(db, cid, "C-1042", "a\x00b", "line\x00\x07 one\nline two")
    t = customer_ticket(db, cid, tid)
    assert t.subject == "ab" and t.body == "line one\nline two"
    with pytest.raises(InvalidInput, match="empty"):
        open_ticket(db, cid, "C-1042", "x", "\x00 \n")


def test_customers_see_only_their_tickets(db: Database) -> None:
    marie, paul = customer_id(db, MARIE), customer_id(db, PAUL)
    theirs = {r.id for r in customer_tickets(db, paul).rows}
    mine = {r.id for r in customer_tickets(db, marie).rows}
    assert theirs and mine and not theirs & mine
    for tid in theirs:
        with pytest.raises(NotFound):
            customer_ticket(db, marie, tid)


def test_lists_are_paginated(db: Database) -> None:
    cid = customer_id(db, MARIE)
    for i in range(60):
        open_ticket(db, cid, "C-1042", f"t{i}", "body")
    first, last = inbox(db, 1), inbox(db, 99)
    assert len(first.rows) == 25 and first.pages == 3 and first.total == 64
    assert last.page == 3 and len(last.rows) == 14
    assert not {r.id for r in first.rows} & {r.id for r in last.rows}
