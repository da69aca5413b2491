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

Fewer transactions, the same trace: a write is built as statements first
(:meth:`ReplayableRecorder.statements`), so that a run's end can be carried into the next
run's first write (:meth:`ReplayableRecorder.ended`, :meth:`RunRecorder.carry`) and a
timed write that is one statement runs without ``BEGIN`` and ``COMMIT`` on PostgreSQL
(the events are one multi-row ``INSERT`` there: :class:`~tether_desk.db.Database`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Executable, bindparam, text, update
from sqlalchemy.dialects import postgresql, sqlite

from tether.errors import ConfigError
from tether.messages import Usage
from tether_desk.db import Database
from tether_desk.models import Run, RunEvent
from tether_desk.trace import MARK_RESUMED, RunRecorder, Written, final_values

T = TypeVar("T")
_FINISH_RUN = update(Run).where(Run.id == bindparam("run_id_"))
_FINAL = ("status", "outcome_reason", "input_tokens", "output_tokens", "requests", "finished_at")
_PG_INSERT_EVENTS = (
    "INSERT INTO run_events (run_id, seq, kind, data, created_at) "
    "SELECT :run_id, e.seq, e.kind, e.data, e.created_at "
    "FROM json_to_recordset(CAST(:events AS json)) "
    "AS e(seq integer, kind varchar, data json, created_at timestamp) "
    "ON CONFLICT (run_id, seq) DO NOTHING"
)
_PG_EVENTS = text(_PG_INSERT_EVENTS)
"""The events' insert on PostgreSQL: one statement of any number of rows, sent as one
JSON text (SQLAlchemy's multi-row ``INSERT`` leaves ``ON CONFLICT`` out, psycopg's
``executemany`` runs a statement per row, and its arrays are dumped in Python)."""
_RUN_COLUMNS = (
    "id, ticket_id, kind, status, outcome_reason, input_tokens, output_tokens, requests, "
    "started_at, finished_at"
)
_INSERT_RUN = (
    f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES (:id, :ticket_id, :kind, :status, "
    ":outcome_reason, :input_tokens, :output_tokens, :requests, :started_at, :finished_at) "
    "ON CONFLICT (id) DO "
)
_SET_FINAL = ", ".join(f"{c} = :{c}" for c in _FINAL)
_PG_WITH_EVENTS = {
    kind: text(f"WITH run AS ({head}) {_PG_INSERT_EVENTS}")
    for kind, head in {
        "resumed": "UPDATE runs SET status = 'running' "
        "WHERE id = :run_id AND status = 'awaiting_approval'",
        "new": _INSERT_RUN + "NOTHING",
        "ended": _INSERT_RUN + "UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in _FINAL),
        "finished": f"UPDATE runs SET {_SET_FINAL} WHERE id = :run_id",
    }.items()
}
"""A write of the trace with events as one statement on PostgreSQL: the run's row (marked
running again, inserted, inserted or ended, or ended) in a ``WITH`` before the events'
insert (what :meth:`ReplayableRecorder.statements` writes as two statements elsewhere)."""
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
        events: Executable = _PG_EVENTS
        if dialect != "postgresql":
            events = insert(RunEvent).on_conflict_do_nothing(
                index_elements=[RunEvent.run_id, RunEvent.seq]
            )
        _INSERTS[dialect] = (run.on_conflict_do_nothing(index_elements=[Run.id]), ended, events)
    return _INSERTS[dialect]


def _one_statement(written: Written) -> bool:
    """Whether ``written`` runs as one statement (not one per row of a list)."""
    return len(written) == 1 and not isinstance(written[0][1], list)


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

    @contextmanager
    def _kept_on_failure(self) -> Iterator[None]:
        resumed = self._resumed  # the run is marked running again by the write that works
        try:
            with super()._kept_on_failure():
                yield
        except BaseException:
            self._resumed = resumed
            raise

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

    def flush(self) -> None:
        """Write what is pending now: on PostgreSQL, a write that is one statement (the
        events of a timed write) in autocommit, its own transaction."""
        self._cancel_timer()
        with self._kept_on_failure():
            written = self._take_carried() + self.statements(self.db.dialect)
            if not written:
                return
            single = self.db.dialect == "postgresql" and _one_statement(written)
            with self.db.one_statement() if single else self.db.write_connection() as c:
                for statement, parameters in written:
                    c.execute(statement, parameters)

    def write_if(
        self,
        statement: Executable,
        parameters: dict[str, Any],
        then: Callable[[Connection], T] | None = None,
    ) -> tuple[bool, T | None]:
        """``statement`` (a conditional update) then, if it changed a row, what is pending
        of this trace and ``then`` (a read), in one transaction: whether it changed one
        (if not, nothing of the trace is written) and what ``then`` read."""
        read: T | None = None
        with self._kept_on_failure(), self.db.write_connection() as c:
            if not c.execute(statement, parameters).rowcount:
                return False, None
            for written, values in self._take_carried() + self.statements(self.db.dialect):
                c.execute(written, values)
            if then is not None:
                read = then(c)
        return True, read

    def ended(
        self, dialect: str, status: str, reason: str, usage: Usage, *also: tuple[Executable, Any]
    ) -> Written:
        """The run's end (what :meth:`finish` writes, ``also`` first) as statements, for
        another recorder to :meth:`~tether_desk.trace.RunRecorder.carry` into its next
        transaction. This recorder writes nothing more."""
        self._cancel_timer()
        return [*also, *self.statements(dialect, final_values(status, reason, usage))]

    def statements(self, dialect: str, final: dict[str, Any] | None = None) -> Written:
        """What the next write of this trace executes (the run's row, its outcome, the
        buffered events numbered on), taken: the recorder counts them as written."""
        assert self._seq is not None
        both = self._resumed and self._new_run is not None  # never: a resumed run has a row
        if dialect == "postgresql" and self._buffer and not both:
            return [self._pg_statement(final)]
        insert_run, end_run, insert_events = _inserts(dialect)
        out: Written = []
        if self._resumed and final is None:
            out.append((MARK_RESUMED, {"run_id_": self.run_id}))
        self._resumed = False
        if self._new_run is not None:  # the row may be there, from an earlier execution
            if final is None:
                out.append((insert_run, self._new_run))
            else:
                out.append((end_run, {**self._new_run, **final}))
            self._new_run = None
        elif final is not None:
            out.append((_FINISH_RUN, {"run_id_": self.run_id, **final}))
        rows, self._buffer = self._buffer, []
        if rows:
            first = self._seq + 1
            self._seq += len(rows)
            out.append((insert_events, self._events(dialect, first, rows)))
        return out

    def _pg_statement(self, final: dict[str, Any] | None) -> tuple[Executable, Any]:
        """:meth:`statements` on PostgreSQL with events buffered: one statement."""
        assert self._seq is not None
        parameters: dict[str, Any] = {"run_id": self.run_id}
        if self._new_run is not None:
            kind = "new" if final is None else "ended"
            parameters.update({"finished_at": None, **self._new_run, **(final or {})})
        elif final is not None:
            kind = "finished"
            parameters.update(final)
        else:
            kind = "resumed" if self._resumed else ""
        self._new_run, self._resumed = None, False
        rows, self._buffer = self._buffer, []
        first = self._seq + 1
        self._seq += len(rows)
        parameters.update(self._events("postgresql", first, rows))
        return _PG_WITH_EVENTS.get(kind, _PG_EVENTS), parameters

    def _events(self, dialect: str, first: int, rows: list[dict[str, Any]]) -> Any:
        """The parameters of the events' insert, numbered from ``first``: a row each, or
        all in one JSON text on PostgreSQL (:data:`_PG_EVENTS`)."""
        if dialect != "postgresql":
            return [{"run_id": self.run_id, "seq": first + i, **r} for i, r in enumerate(rows)]
        events = [
            {**r, "seq": first + i, "created_at": r["created_at"].isoformat()}
            for i, r in enumerate(rows)
        ]
        return {"run_id": self.run_id, "events": json.dumps(events)}

    def _write(self, connection: Connection, final: dict[str, Any] | None = None) -> None:
        for statement, parameters in self._take_carried() + self.statements(
            connection.dialect.name, final
        ):
            connection.execute(statement, parameters)
