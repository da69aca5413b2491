"""The refund rule on cumulative totals, under concurrency, on SQLite and PostgreSQL."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func, select

from tether_desk.db import Database
from tether_desk.errors import InvalidInput, RuleViolation
from tether_desk.models import Order, Refund
from tether_desk.refunds import refund


def order_id(db: Database, number: str) -> int:
    with db.read() as s:
        return int(s.scalar(select(Order.id).where(Order.number == number)))  # type: ignore[arg-type]


def ledger_total(db: Database, oid: int) -> tuple[int, int]:
    with db.read() as s:
        total = s.scalar(
            select(func.coalesce(func.sum(Refund.amount_cents), 0)).where(Refund.order_id == oid)
        )
        rows = s.scalar(select(func.count(Refund.id)).where(Refund.order_id == oid))
    return int(total or 0), int(rows or 0)


def hammer(db: Database, oid: int, attempts: int, cents: int) -> list[str]:
    """``attempts`` refunds of ``cents`` at once, each with its own key."""

    def one(i: int) -> str:
        try:
            return refund(db, oid, cents, f"run:call_{i}").status
        except RuleViolation:
            return "refused"

    with ThreadPoolExecutor(max_workers=32) as pool:
        return list(pool.map(one, range(attempts)))


def check_hundred_concurrent(db: Database) -> None:
    oid = order_id(db, "C-1042")  # 89.90 paid
    outcomes = hammer(db, oid, 100, 1000)  # 100 x 10.00
    total, rows = ledger_total(db, oid)
    assert total <= 8990
    assert outcomes.count("refunded") == 8 == rows
    assert total == 8000
    assert outcomes.count("refused") == 92


def test_hundred_concurrent_refunds_never_exceed_the_amount_paid_sqlite(db: Database) -> None:
    check_hundred_concurrent(db)


def test_hundred_concurrent_refunds_never_exceed_the_amount_paid_postgresql(
    pg_db: Database,
) -> None:
    check_hundred_concurrent(pg_db)


def check_same_key_refunds_once(db: Database) -> None:
    oid = order_id(db, "C-1042")

    def one(_: int) -> str:
        return refund(db, oid, 2000, "run-7:call_3").status

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(one, range(40)))
    assert outcomes.count("refunded") == 1
    assert outcomes.count("already_done") == 39
    assert ledger_total(db, oid) == (2000, 1)


def test_a_retried_call_with_the_same_key_refunds_once_sqlite(db: Database) -> None:
    check_same_key_refunds_once(db)


def test_a_retried_call_with_the_same_key_refunds_once_postgresql(pg_db: Database) -> None:
    check_same_key_refunds_once(pg_db)


def test_a_key_reused_for_another_amount_is_refused(db: Database) -> None:
    oid = order_id(db, "C-1042")
    refund(db, oid, 1000, "k")
    with pytest.raises(RuleViolation, match="already used"):
        refund(db, oid, 2000, "k")
    assert ledger_total(db, oid) == (1000, 1)


@pytest.mark.parametrize("cents", [0, -1, -8990])
def test_a_refund_must_be_above_zero(db: Database, cents: int) -> None:
    with pytest.raises(RuleViolation, match="above zero"):
        refund(db, order_id(db, "C-1042"), cents, "k")


def test_the_rule_is_on_the_cumulative_total(db: Database) -> None:
    oid = order_id(db, "C-1042")
    assert refund(db, oid, 8000, "a").status == "refunded"
    with pytest.raises(RuleViolation, match=r"at most 9\.90 EUR remains"):
        refund(db, oid, 1000, "b")
    assert refund(db, oid, 990, "c").total_refunded_cents == 8990
    with pytest.raises(RuleViolation):
        refund(db, oid, 1, "d")
    assert ledger_total(db, oid) == (8990, 2)


def test_unknown_order_and_bad_key(db: Database) -> None:
    with pytest.raises(InvalidInput, match="no such order"):
        refund(db, 999_999, 100, "k")
    with pytest.raises(InvalidInput, match="idempotency key"):
        refund(db, order_id(db, "C-1042"), 100, "")
