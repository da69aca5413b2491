"""The persisted trace of every run: events, tokens and outcome, in the database.

:class:`RunRecorder` is a listener of the agent loop. It turns each event into a small
JSON-ready row (texts capped) and writes them in batches: when a model request has waited
:data:`FLUSH_AFTER` seconds (so a run in progress can be followed live: the console streams
new rows while a slow model thinks), and at the end, in the transaction that records the
run's outcome and the ticket's next state. A model that answers at once costs no write until
the run ends; a finished run can be read back from the database alone.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Executable, bindparam, func, insert, select, update

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
from tether_desk.operations.transient import is_transient

TEXT_CAP = 2_000
FLUSH_AFTER = 0.1
"""Seconds a model request's events may wait in memory before the live view gets them."""
log = logging.getLogger("tether_desk")

Also = Executable | Callable[[Connection], object]
"""What :meth:`RunRecorder.finish` writes in its transaction besides the trace: a statement,
or a function of the connection (which may :meth:`RunRecorder.note` what it did)."""
Written = list[tuple[Executable, Any]]
"""Statements with their parameters: another write, carried into a recorder's next
transaction (:meth:`RunRecorder.carry`)."""

_INSERT_RUN = insert(Run)
_INSERT_EVENTS = insert(RunEvent)
_FINISH_RUN = update(Run).where(Run.id == bindparam("run_id_"))
_LAST_SEQ = select(func.max(RunEvent.seq)).where(RunEvent.run_id == bindparam("run_id_"))
MARK_RESUMED = (  # a resumed run runs again, unless another resume already took it further
    update(Run)
    .where(Run.id == bindparam("run_id_"), Run.status == "awaiting_approval")
    .values(status="running")
)


def _cap(text: str) -> str:
    return text if len(text) <= TEXT_CAP else f"{text[:TEXT_CAP]} [{len(text) - TEXT_CAP} more]"


def _trimmed(result: str) -> str:
    """What ``read_ticket`` left out of the thread or cut, as it told the model."""
    try:
        content = json.loads(result).get("content", {})
    except (ValueError, AttributeError):
        return ""
    if not isinstance(content, dict):
        return ""
    said = [content.get("thread_left_out"), content.get("thread_summary")]
    return " ".join(s for s in said if isinstance(s, str) and s)


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
        data = {
            "turn": event.turn,
            "call_id": event.call.id,
            "tool": event.call.name,
            "result": _cap(event.result.content),
            "is_error": event.result.is_error,
            "ms": round(event.seconds * 1000, 2),
        }
        if event.call.name == "read_ticket" and (trimmed := _trimmed(event.result.content)):
            data["context"] = f"thread trimmed for the model: {trimmed}"
        return "tool_finished", data
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
        self._seq: int | None = 0
        """The last sequence number written (``None``: a resumed run, read at first write)."""
        self._new_run: dict[str, Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._carried: Written = []

    def start(self, *, resumed: bool = False) -> RunRecorder:
        """Prepare the run's row, written with its first events (no transaction of its
        own), or (``resumed``) continue its sequence: the last number is read, and the run
        marked running again, by the first write."""
        if resumed:
            self._seq = None
            return self
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

    def __call__(self, event: Event) -> None:
        row = event_data(event)
        if row is None:
            return
        self.note(*row)
        if isinstance(event, ModelRequest):  # the live view's step, if the model is slow
            self.flush_soon()

    def note(self, kind: str, data: dict[str, Any]) -> None:
        """Add an event of the desk's own (triage result, approval requested, decision)."""
        self._buffer.append({"kind": kind, "data": data, "created_at": utcnow()})

    def carry(self, written: Written) -> None:
        """Write ``written`` (another run's, whose events come before this one's) first in
        this recorder's next transaction, whichever it is (a timed write, the end): one
        transaction less, and what it holds is written no later than this run's events
        that follow it."""
        self._carried.extend(written)

    def flush_soon(self) -> None:
        """Write the buffered events in :data:`FLUSH_AFTER` seconds unless they are written
        before (the run ends first): the live view sees a slow step, a quick one costs no
        transaction."""
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._timer = loop.call_later(FLUSH_AFTER, self._flush_due)

    def _flush_due(self) -> None:
        self._timer = None
        try:
            self.flush()
        except Exception as exc:  # the run goes on; its end writes what is left
            if not is_transient(exc):
                log.exception("writing the trace of run %s failed", self.run_id)
                return
            log.warning(  # an outage: one line, not a traceback per timer
                "writing the trace of run %s deferred (%s); the run's end writes it",
                self.run_id,
                type(exc).__name__,
            )

    def flush(self) -> None:
        """Write the buffered events now."""
        self._cancel_timer()
        pending = self._buffer or self._carried or self._new_run is not None
        if not pending and self._seq is not None:
            return
        with self._kept_on_failure(), self.db.write_connection() as c:
            self._write(c)

    @contextmanager
    def _kept_on_failure(self) -> Iterator[None]:
        """What is not written yet (the run's row, the events, where they are numbered
        from) stays as it was if the transaction fails (a full disk, a lost server): the
        next write sends it all again, never events without their run."""
        new_run, buffer, seq, carried = self._new_run, self._buffer, self._seq, self._carried
        try:
            yield
        except BaseException:
            self._new_run, self._seq, self._carried = new_run, seq, carried
            if self._buffer is not buffer:  # taken for the insert: back, before any since
                self._buffer = buffer + self._buffer
            raise

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _take_carried(self) -> Written:
        """What :meth:`carry` holds, taken for a write (given back if it fails)."""
        carried, self._carried = self._carried, []
        return carried

    def _write(self, connection: Connection, final: dict[str, Any] | None = None) -> None:
        for statement, parameters in self._take_carried():
            connection.execute(statement, parameters)
        if self._seq is None:  # resumed: continue after what is stored, under the write lock
            self._seq = int(connection.scalar(_LAST_SEQ, {"run_id_": self.run_id}) or 0)
            if final is None:
                connection.execute(MARK_RESUMED, {"run_id_": self.run_id})
        if self._new_run is not None:
            connection.execute(_INSERT_RUN, {**self._new_run, **(final or {})})
            self._new_run = None
        elif final is not None:
            connection.execute(_FINISH_RUN, {"run_id_": self.run_id, **final})
        self._insert_buffered(connection, _INSERT_EVENTS)

    def _insert_buffered(self, connection: Connection, insert_events: Executable) -> None:
        """Insert the buffered events, numbered on from the last one written."""
        assert self._seq is not None
        rows, self._buffer = self._buffer, []
        if rows:
            first = self._seq + 1
            self._seq += len(rows)
            connection.execute(
                insert_events,
                [{"run_id": self.run_id, "seq": first + i, **r} for i, r in enumerate(rows)],
            )

    def finish(self, status: str, reason: str, usage: Usage, *also: Also) -> None:
        """Write, in one transaction: ``also`` first (the ticket's next state: statements,
        or functions of the connection that may :meth:`note` what they did), then what is
        left of the trace and the run's outcome and tokens. If ``also`` fails, nothing is
        written and the events stay buffered."""
        self._cancel_timer()
        final = final_values(status, reason, usage)
        with self._kept_on_failure(), self.db.write_connection() as c:
            for item in also:
                if isinstance(item, Executable):
                    c.execute(item)
                else:
                    item(c)
            self._write(c, final)


def final_values(status: str, reason: str, usage: Usage) -> dict[str, Any]:
    """The run row's values at its end."""
    return {
        "status": status,
        "outcome_reason": reason[:1000],
        "input_tokens": usage.input_tokens + usage.cache_read_tokens,
        "output_tokens": usage.output_tokens,
        "requests": usage.requests,
        "finished_at": utcnow(),
    }


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
