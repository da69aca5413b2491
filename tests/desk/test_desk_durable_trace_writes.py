"""Fewer writes of the durable desk's trace, the same trace: the triage's start goes with
the claim, a run's end rides in the next run's first write, a timed write of events is
one statement (in autocommit on PostgreSQL), and the live view still shows a slow model
call with every event before it while the model thinks."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from helpers import add_ticket, until_status
from sqlalchemy import Connection, event, select, update
from sqlalchemy.exc import OperationalError
from test_desk_durable_trace import trace

from tether.messages import Usage
from tether_desk.db import Database
from tether_desk.durable.recorder import ReplayableRecorder
from tether_desk.models import Run, RunEvent, Ticket
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.tickets import set_ticket


def _new(db: Database) -> Any:
    with db.write_connection() as c:
        set_ticket(c, 1, status="new")
    return update(Ticket).where(Ticket.id == 1, Ticket.status == "new").values(status="triaging")


def test_a_claim_writes_the_triage_runs_start_or_nothing(any_db: Database) -> None:
    claim = _new(any_db)
    triage = ReplayableRecorder(any_db, "run-t", 1, "triage")
    triage.start()
    triage.note("model_request", {"turn": 1})
    status = select(Ticket.status).where(Ticket.id == 1)
    read = triage.write_if(claim, {}, lambda c: c.scalar(status))  # read in its transaction
    assert read == (True, "triaging")  # and the run shows while the model thinks
    assert trace(any_db, "run-t") == ([(1, "model_request")], ("running", 0))

    late = ReplayableRecorder(any_db, "run-u", 1, "triage")
    late.start()
    late.note("model_request", {"turn": 1})
    assert late.write_if(claim, {}) == (False, None)  # not new any more: no run, no event
    assert trace(any_db, "run-u") == ([], None)


def test_a_runs_end_rides_in_the_next_runs_first_write(any_db: Database) -> None:
    _new(any_db)
    triage = ReplayableRecorder(any_db, "run-t", 1, "triage")
    triage.start()
    triage.note("model_request", {"turn": 1})
    triage.flush()
    said = {"category": "refund", "replies": ["Colis abîmé, « 20 € »", 'a "quote" \\ €'], "n": [1]}
    triage.note("triage", said)
    category = update(Ticket).where(Ticket.id == 1).values(category="refund")
    ended = triage.ended(any_db.dialect, "completed", "refund", Usage(requests=1), (category, {}))
    assert trace(any_db, "run-t") == ([(1, "model_request")], ("running", 0))  # not yet

    refund = ReplayableRecorder(any_db, "run-r", 1, "refund")
    refund.start()
    refund.carry(ended)
    refund.note("run_started", {})
    refund.note("model_request", {"turn": 1})
    refund.flush()  # the refund's first model call is slow: both runs show, in one write

    assert trace(any_db, "run-t") == ([(1, "model_request"), (2, "triage")], ("completed", 1))
    assert trace(any_db, "run-r") == ([(1, "run_started"), (2, "model_request")], ("running", 0))
    with any_db.read_connection() as c:
        assert c.scalar(select(Ticket.category).where(Ticket.id == 1)) == "refund"
        data = c.scalar(select(RunEvent.data).where(RunEvent.run_id == "run-t", RunEvent.seq == 2))
    assert data == said  # the same JSON, whichever way the rows were sent


def test_a_failed_write_keeps_what_it_carried(
    any_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    _new(any_db)
    triage = ReplayableRecorder(any_db, "run-t", 1, "triage")
    triage.start()
    triage.note("triage", {})
    ended = triage.ended(any_db.dialect, "completed", "refund", Usage(requests=1))
    refund = ReplayableRecorder(any_db, "run-r", 1, "refund")
    refund.start()
    refund.carry(ended)
    refund.note("model_request", {})
    real = any_db.write_connection

    @contextmanager
    def failing_commit() -> Iterator[Connection]:
        with real() as c:
            yield c
            raise OperationalError("COMMIT", {}, Exception("disk full"))

    monkeypatch.setattr(any_db, "write_connection", failing_commit)
    with pytest.raises(OperationalError):
        refund.flush()
    monkeypatch.setattr(any_db, "write_connection", real)
    assert trace(any_db, "run-t") == ([], None)
    refund.flush()  # sent again whole: the carried end, the run, its event
    assert trace(any_db, "run-t") == ([(1, "triage")], ("completed", 1))
    assert trace(any_db, "run-r") == ([(1, "model_request")], ("running", 0))


def test_on_postgresql_a_timed_write_is_one_statement_in_autocommit(pg_db: Database) -> None:
    """Events alone (twenty of them) are one statement with no transaction around it; a
    resumed run's first timed write marks it running in that same statement, a new run's
    inserts its row there."""
    seen: list[tuple[str, str | None]] = []

    def statement(conn: Any, cursor: Any, sql: str, params: Any, ctx: Any, many: bool) -> None:
        seen.append((sql.split()[0], conn.get_execution_options().get("isolation_level")))

    waiting = ReplayableRecorder(pg_db, "run-w", 1, "refund")
    waiting.start()
    waiting.note("approval_requested", {})
    waiting.finish("awaiting_approval", "", Usage(requests=1))
    event.listen(pg_db.engine, "before_cursor_execute", statement)
    try:
        resumed = ReplayableRecorder(pg_db, "run-w", 1, "refund", seq=1, resumed=True)
        resumed.note("decision", {})
        resumed.flush()
        assert seen == [("WITH", "AUTOCOMMIT")]
        assert trace(pg_db, "run-w") == (
            [(1, "approval_requested"), (2, "decision")],
            ("running", 1),
        )
        seen.clear()
        for n in range(20):
            resumed.note("tool_finished", {"n": n})
        resumed.flush()
        assert seen == [("INSERT", "AUTOCOMMIT")]
        seen.clear()
        fresh = ReplayableRecorder(pg_db, "run-n", 1, "refund")
        fresh.start()
        fresh.note("model_request", {})
        fresh.flush()  # a new run's row and its first events: one statement too
        assert seen == [("WITH", "AUTOCOMMIT")]
        assert trace(pg_db, "run-n") == ([(1, "model_request")], ("running", 0))
    finally:
        event.remove(pg_db.engine, "before_cursor_execute", statement)
    events, _ = trace(pg_db, "run-w")
    assert [s for s, _ in events] == list(range(1, 23))


async def test_a_slow_model_shows_in_the_durable_trace_while_it_thinks(
    durable: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the triage's model thinks, its run and request show (written by the claim);
    while the refund agent's first model call thinks, the triage's end, the ticket's
    category and the refund run's request show (its first timed write)."""
    monkeypatch.setattr(durable, "client", DeskScriptedModel(delay=0.6))
    tid = add_ticket(durable.db, "Colis abime, je demande 6 EUR.")
    assert durable.runs is not None
    seen: list[tuple[str | None, tuple[tuple[str, str, tuple[str, ...]], ...]]] = []
    await durable.runs.submit_new()
    for _ in range(200):
        with durable.db.read_connection() as c:
            category = c.scalar(select(Ticket.category).where(Ticket.id == tid))
            runs = c.execute(
                select(Run.id, Run.kind, Run.status)
                .where(Run.ticket_id == tid)
                .order_by(Run.started_at)
            ).all()
            snapshot = tuple(
                (
                    kind,
                    status,
                    tuple(
                        c.scalars(
                            select(RunEvent.kind)
                            .where(RunEvent.run_id == run_id)
                            .order_by(RunEvent.seq)
                        )
                    ),
                )
                for run_id, kind, status in runs
            )
        if not seen or seen[-1] != (category, snapshot):
            seen.append((category, snapshot))
        if any(status == "awaiting_approval" for _, status, _ in snapshot):
            break
        await asyncio.sleep(0.03)
    assert await until_status(durable.db, tid, "awaiting_approval") == "awaiting_approval"
    assert (None, (("triage", "running", ("model_request",)),)) in seen
    thinking = (
        "refund",
        (
            ("triage", "completed", ("model_request", "triage")),
            ("refund", "running", ("run_started", "model_request")),
        ),
    )
    assert thinking in seen


async def test_a_refund_agent_that_breaks_still_leaves_its_triage_recorded(
    durable: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The triage's end waits for the refund run's first write; the agent breaks before
    any (a listener of its run raises): the triage's end and the ticket's category are
    written all the same."""

    def breaks(event: object) -> None:
        raise RuntimeError("a listener broke")

    monkeypatch.setattr(durable, "listeners", [breaks])  # the refund agent's only
    tid = add_ticket(durable.db, "Colis abime, je demande 7 EUR.")
    assert durable.runs is not None
    await durable.runs.submit_new()
    assert await until_status(durable.db, tid, "failed", "draft_ready") == "failed"
    with durable.db.read_connection() as c:
        assert c.scalar(select(Ticket.category).where(Ticket.id == tid)) == "refund"
        [triage] = c.scalars(select(Run.id).where(Run.ticket_id == tid, Run.kind == "triage"))
    assert trace(durable.db, triage) == ([(1, "model_request"), (2, "triage")], ("completed", 1))
