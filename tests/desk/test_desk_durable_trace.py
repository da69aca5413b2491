"""The durable desk's trace: a run executed again after a crash writes every event once,
with its first execution's number, however each execution batched its writes (a write
when a model call waits, the rest with the step's outcome), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import Connection, select

from tether.errors import ConfigError
from tether.messages import Usage
from tether_desk.db import Database
from tether_desk.durable.recorder import ReplayableRecorder
from tether_desk.models import Run, RunEvent, Ticket
from tether_desk.tickets import set_ticket


def trace(db: Database, run_id: str) -> tuple[list[tuple[int, str]], tuple[str, int] | None]:
    with db.read_connection() as c:
        events = c.execute(
            select(RunEvent.seq, RunEvent.kind)
            .where(RunEvent.run_id == run_id)
            .order_by(RunEvent.seq)
        ).all()
        run = c.execute(select(Run.status, Run.requests).where(Run.id == run_id)).one_or_none()
    return [(s, k) for s, k in events], (run[0], run[1]) if run is not None else None


def test_a_run_executed_again_writes_each_event_once(any_db: Database) -> None:
    def needs_human(note: ReplayableRecorder) -> object:
        def write(c: Connection) -> None:
            set_ticket(c, 1, status="needs_human")
            note.note("handed_over", {})

        return write

    first = ReplayableRecorder(any_db, "run-a", 1, "refund")
    first.start()
    first.note("model_request", {})
    first.flush()  # the model was slow: the run shows while it thinks; then the crash
    assert trace(any_db, "run-a") == ([(1, "model_request")], ("running", 0))

    again = ReplayableRecorder(any_db, "run-a", 1, "refund")  # the workflow runs again
    again.start()
    for kind in ("model_request", "model_response", "tool_finished"):
        again.note(kind, {})  # a fast replay: nothing written before the step's end
    again.finish("completed", "done", Usage(requests=2), needs_human(again))

    assert trace(any_db, "run-a") == (
        [(1, "model_request"), (2, "model_response"), (3, "tool_finished"), (4, "handed_over")],
        ("completed", 2),  # the row the first execution wrote gets the outcome
    )
    with any_db.read_connection() as c:
        assert c.scalar(select(Ticket.status).where(Ticket.id == 1)) == "needs_human"


def test_a_step_replayed_from_the_log_moves_the_trace_on_past_what_it_wrote(
    any_db: Database,
) -> None:
    """The approval's step notes its event inside its transaction; replayed from the log it
    does not run, and the events after it still get their own numbers."""

    def stored(recorder: ReplayableRecorder) -> object:
        def write(c: Connection) -> None:
            recorder.note("approval_requested", {})

        return write

    ticket = ReplayableRecorder(any_db, "run-b", 1, "refund")  # the ticket's workflow
    ticket.start()
    ticket.note("model_request", {})
    ticket.note("model_response", {})
    ticket.flush()  # then it hands the waiting call over to the approval's workflow
    assert ticket.seq == 2

    first = ReplayableRecorder(any_db, "run-b", 1, "refund", seq=2)  # the approval's
    first.note("model_request", {})
    first.finish("awaiting_approval", "", Usage(), stored(first))
    logged = first.seq
    first.logged(logged)
    first.note("decision", {})
    first.flush()  # and the worker dies here

    again = ReplayableRecorder(any_db, "run-b", 1, "refund", seq=2)
    again.note("model_request", {})
    again.logged(logged)  # the step is in the log: it returns without running
    again.note("decision", {})
    again.note("model_response", {})
    again.flush()

    events, _ = trace(any_db, "run-b")
    assert events == [
        (1, "model_request"),
        (2, "model_response"),
        (3, "model_request"),
        (4, "approval_requested"),
        (5, "decision"),
        (6, "model_response"),
    ]


def test_a_replayable_trace_never_reads_its_number_from_the_database(db: Database) -> None:
    with pytest.raises(ConfigError):
        ReplayableRecorder(db, "run-c", 1, "refund").start(resumed=True)


def test_a_run_resumed_after_its_approval_shows_running_from_its_first_write(
    any_db: Database,
) -> None:
    """The decision's step marks the run running again with its first write that does not
    end it (a slow model: the live view), and not at all when its first write is the end."""
    waiting = ReplayableRecorder(any_db, "run-d", 1, "refund")
    waiting.start()
    waiting.note("approval_requested", {})
    waiting.finish("awaiting_approval", "", Usage())
    assert trace(any_db, "run-d")[1] == ("awaiting_approval", 0)

    quick = ReplayableRecorder(any_db, "run-d", 1, "refund", seq=1, resumed=True)
    quick.note("decision", {})
    quick.finish("awaiting_approval", "", Usage(requests=1))  # its only write: its end
    assert trace(any_db, "run-d") == (
        [(1, "approval_requested"), (2, "decision")],
        ("awaiting_approval", 1),
    )

    slow = ReplayableRecorder(any_db, "run-d", 1, "refund", seq=2, resumed=True)
    slow.note("model_request", {})
    slow.flush()  # the model takes its time: the run shows as running
    assert trace(any_db, "run-d")[1] == ("running", 1)
    slow.note("model_response", {})
    slow.flush()
    slow.finish("completed", "", Usage(requests=2))
    assert trace(any_db, "run-d") == (
        [(1, "approval_requested"), (2, "decision"), (3, "model_request"), (4, "model_response")],
        ("completed", 2),
    )
