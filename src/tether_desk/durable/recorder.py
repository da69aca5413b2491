"""A run's trace that a replay can write again without writing anything twice.

A durable workflow executes again after a crash, and the loop emits the same events again
in the same order. :class:`~tether_desk.trace.RunRecorder` numbers events when it writes
them, one after the other from the last number written, so however its writes are batched
(at a run's end, or when a model call waits) the n-th event of a run always gets the same
number; this recorder's inserts skip what is already there (the run's row by its id, each
event by ``(run_id, seq)``). Updates of a run's status stay in steps, which run once.

A step that writes the trace (the triage's record, the approval, the draft) is skipped
when it is replayed, and with it the events it noted and wrote: :meth:`logged` carries the
recorder on after them, so the events that follow get their first execution's numbers.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Executable, bindparam, update
from sqlalchemy.dialects import postgresql, sqlite

from tether.errors import ConfigError
from tether_desk.db import Database
from tether_desk.models import Run, RunEvent
from tether_desk.trace import MARK_RESUMED, RunRecorder

_FINISH_RUN = update(Run).where(Run.id == bindparam("run_id_"))
_FINAL = ("status", "outcome_reason", "input_tokens", "output_tokens", "requests", "finished_at")
_INSERTS: dict[str, tuple[Executable, Executable, Executable]] = {}


def _inserts(dialect: str) -> tuple[Executable, Executable, Executable]:
    """Built once per dialect: the run's insert that skips an existing row, the one that
    sets the outcome of an existing row instead, and the events' insert that skips
    existing rows."""
    if dialect not in _INSERTS:
        insert: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert
        run = insert(Run)
        ended = run.on_conflict_do_update(
            index_elements=[Run.id], set_={c: run.excluded[c] for c in _FINAL}
        )
        events = insert(RunEvent).on_conflict_do_nothing(
            index_elements=[RunEvent.run_id, RunEvent.seq]
        )
        _INSERTS[dialect] = (run.on_conflict_do_nothing(index_elements=[Run.id]), ended, events)
    return _INSERTS[dialect]


class ReplayableRecorder(RunRecorder):
    """:class:`~tether_desk.trace.RunRecorder` with inserts that skip rows already written.

    ``seq`` continues a run's sequence from another workflow (the approval's), where
    :meth:`RunRecorder.start` with ``resumed`` would read it from the database (which, in
    a replay, already holds what comes next). ``resumed``: the run goes on after a wait,
    marked running again by the first write that does not end it (as a resumed
    :class:`~tether_desk.trace.RunRecorder` is)."""

    def __init__(
        self,
        db: Database,
        run_id: str,
        ticket_id: int,
        kind: str,
        *,
        seq: int | None = None,
        resumed: bool = False,
    ) -> None:
        super().__init__(db, run_id, ticket_id, kind)
        self._continued = seq is not None
        self._resumed = resumed
        if seq is not None:
            self._seq = seq

    @property
    def seq(self) -> int:
        """The sequence number of the last event noted (written or still buffered)."""
        assert self._seq is not None  # never read back from the database
        return self._seq + len(self._buffer)

    def start(self, *, resumed: bool = False) -> RunRecorder:
        if resumed:
            raise ConfigError("a replayable trace continues from the number it is given")
        if self._continued:
            return self
        return super().start()

    def hold(self) -> None:
        """Drop a pending timed write: a step body is about to write the trace (with what
        is buffered; in a thread on PostgreSQL), and nothing else may write it meanwhile."""
        self._cancel_timer()

    def logged(self, seq: int) -> None:
        """A step that wrote this trace through event ``seq`` is logged, by this execution
        or (a replay) by an earlier one: what is buffered is written; carry on after it."""
        self._cancel_timer()
        self._buffer.clear()
        self._new_run = None
        self._seq = seq

    def _write(self, connection: Connection, final: dict[str, Any] | None = None) -> None:
        assert self._seq is not None
        insert_run, end_run, insert_events = _inserts(connection.dialect.name)
        if self._resumed:
            if final is None:
                connection.execute(MARK_RESUMED, {"run_id_": self.run_id})
            self._resumed = False
        if self._new_run is not None:  # the row may be there, from an earlier execution
            if final is None:
                connection.execute(insert_run, self._new_run)
            else:
                connection.execute(end_run, {**self._new_run, **final})
            self._new_run = None
        elif final is not None:
            connection.execute(_FINISH_RUN, {"run_id_": self.run_id, **final})
        self._insert_buffered(connection, insert_events)
