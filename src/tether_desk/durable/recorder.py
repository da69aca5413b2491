"""A run's trace that a replay can write again without writing anything twice.

A durable workflow executes again after a crash, and the loop emits the same events again
in the same order: the recorder gives them the same sequence numbers, and its inserts skip
what is already there (the run's row by its id, each event by ``(run_id, seq)``). Updates
of a run's status stay in steps, which run once.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite

from tether_desk.db import Database
from tether_desk.models import Run, RunEvent
from tether_desk.trace import RunRecorder


class ReplayableRecorder(RunRecorder):
    """:class:`~tether_desk.trace.RunRecorder` with inserts that skip rows already written.

    ``seq`` continues a run's sequence from another workflow (the approval's), where
    :meth:`RunRecorder.start` with ``resumed`` would read it from the database."""

    def __init__(
        self, db: Database, run_id: str, ticket_id: int, kind: str, *, seq: int | None = None
    ) -> None:
        super().__init__(db, run_id, ticket_id, kind)
        self._continued = seq is not None
        if seq is not None:
            self._seq = seq

    @property
    def seq(self) -> int:
        """The sequence number of the last event noted."""
        return self._seq

    def start(self, *, resumed: bool = False) -> RunRecorder:
        if self._continued:
            return self
        return super().start(resumed=resumed)

    def _write(self, connection: Connection) -> None:
        insert: Any = postgresql.insert if self.db.dialect == "postgresql" else sqlite.insert
        if self._new_run is not None:
            connection.execute(insert(Run).values(**self._new_run).on_conflict_do_nothing())
            self._new_run = None
        rows, self._buffer = self._buffer, []
        if rows:
            connection.execute(insert(RunEvent).on_conflict_do_nothing(), rows)
