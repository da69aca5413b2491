"""The persisted trace of every run: events, tokens and outcome, in the database.

:class:`RunRecorder` is a listener of the agent loop. It turns each event into a small
JSON-ready row (texts capped) and writes them in batches, once per model request and at
the end, so a run in progress can be followed live (the console streams new rows) and a
finished run can be read back from the database alone.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Executable, func, insert, select, update

from tether.events import (
    Event,
    ModelRequest,
    ModelResponse,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from tether.messages import Usage
from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.models import Run, RunEvent

TEXT_CAP = 2_000


def _cap(text: str) -> str:
    return text if len(text) <= TEXT_CAP else f"{text[:TEXT_CAP]} [{len(text) - TEXT_CAP} more]"


def event_data(event: Event) -> tuple[str, dict[str, Any]] | None:
    """The row for one loop event (``None`` for events the trace does not keep)."""
    if isinstance(event, RunStarted):
        return "run_started", {}
    if isinstance(event, ModelRequest):
        return "model_request", {"turn": event.turn, "messages": event.messages}
    if isinstance(event, ModelResponse):
        r = event.response
        return "model_response", {
            "turn": event.turn,
            "text": _cap(r.message.text),
            "calls": [
                {"tool": c.name, "arguments": c.arguments_json()} for c in r.message.tool_calls
            ],
            "stop": r.stop_reason.value,
            "input_tokens": r.usage.input_tokens,
            "output_tokens": r.usage.output_tokens,
        }
    if isinstance(event, ToolCallStarted):
        return "tool_started", {
            "turn": event.turn,
            "call_id": event.call.id,
            "tool": event.call.name,
            "arguments": _cap(event.call.arguments_json()),
        }
    if isinstance(event, ToolCallFinished):
        return "tool_finished", {
            "turn": event.turn,
            "call_id": event.call.id,
            "tool": event.call.name,
            "result": _cap(event.result.content),
            "is_error": event.result.is_error,
            "ms": round(event.seconds * 1000, 2),
        }
    if isinstance(event, RunFinished):
        return "run_finished", {"outcome": event.outcome.kind, "reason": event.outcome.reason}
    return None


class RunRecorder:
    """Records one run's trace (a resumed run continues the same sequence)."""

    def __init__(self, db: Database, run_id: str, ticket_id: int, kind: str) -> None:
        self.db = db
        self.run_id = run_id
        self.ticket_id = ticket_id
        self.kind = kind
        self._buffer: list[dict[str, Any]] = []
        self._seq = 0
        self._new_run: dict[str, Any] | None = None

    def start(self, *, resumed: bool = False) -> RunRecorder:
        """Create the run's row (written with the first events, one transaction less), or
        (``resumed``) continue its sequence."""
        if not resumed:
            self._new_run = {
                "id": self.run_id,
                "ticket_id": self.ticket_id,
                "kind": self.kind,
                "status": "running",
                "outcome_reason": "",
                "input_tokens": 0,
                "output_tokens": 0,
                "requests": 0,
                "started_at": utcnow(),
            }
            return self
        with self.db.write_connection() as c:
            last = c.scalar(select(func.max(RunEvent.seq)).where(RunEvent.run_id == self.run_id))
            c.execute(update(Run).where(Run.id == self.run_id).values(status="running"))
        self._seq = int(last or 0)
        return self

    def __call__(self, event: Event) -> None:
        row = event_data(event)
        if row is None:
            return
        self.note(*row)
        if isinstance(event, ModelRequest):  # one write per turn: the live view's step
            self.flush()

    def note(self, kind: str, data: dict[str, Any]) -> None:
        """Add an event of the desk's own (triage result, approval requested, decision)."""
        self._seq += 1
        self._buffer.append(
            {
                "run_id": self.run_id,
                "seq": self._seq,
                "kind": kind,
                "data": data,
                "created_at": utcnow(),
            }
        )

    def flush(self) -> None:
        """Write the buffered events."""
        if not self._buffer and self._new_run is None:
            return
        with self.db.write_connection() as c:
            self._write(c)

    def _write(self, connection: Connection) -> None:
        if self._new_run is not None:
            connection.execute(insert(Run).values(**self._new_run))
            self._new_run = None
        rows, self._buffer = self._buffer, []
        if rows:
            connection.execute(insert(RunEvent), rows)

    def finish(self, status: str, reason: str, usage: Usage, *also: Executable) -> None:
        """Write what is left and the run's outcome and tokens, and the statements
        ``also`` (the ticket's new state), in one transaction."""
        with self.db.write_connection() as c:
            self._write(c)
            for statement in also:
                c.execute(statement)
            c.execute(
                update(Run)
                .where(Run.id == self.run_id)
                .values(
                    status=status,
                    outcome_reason=reason[:1000],
                    input_tokens=usage.input_tokens + usage.cache_read_tokens,
                    output_tokens=usage.output_tokens,
                    requests=usage.requests,
                    finished_at=utcnow(),
                )
            )


def run_events(db: Database, run_id: str, after: int = 0, limit: int = 500) -> list[RunEvent]:
    """The run's events after sequence number ``after``, in order."""
    with db.read() as s:
        rows = s.scalars(
            select(RunEvent)
            .where(RunEvent.run_id == run_id, RunEvent.seq > after)
            .order_by(RunEvent.seq)
            .limit(limit)
        ).all()
        for r in rows:
            s.expunge(r)
        return list(rows)


def ticket_runs(db: Database, ticket_id: int) -> list[Run]:
    """The ticket's runs, oldest first."""
    with db.read() as s:
        rows = s.scalars(
            select(Run).where(Run.ticket_id == ticket_id).order_by(Run.started_at)
        ).all()
        for r in rows:
            s.expunge(r)
        return list(rows)
