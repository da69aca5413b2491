"""Where run states wait for their approvals, and the claim that makes a resume happen once.

A run that ends ``awaiting_approval`` leaves a :class:`~tether.outcomes.RunState` numbered
by ``version``. Two approvers clicking at once, a retried web request or a worker restarted
after a crash could each resume the same state and run the approved call twice. A store
gives each state one resume: :meth:`StateStore.claim` is atomic, and only its first caller
for a given ``(run_id, version)`` gets ``True``. ``Agent.resume(state, decisions,
store=store)`` claims before it runs anything. Irreversible tools still key their effect
on the call id (``ctx.call.id``), which is stable across resumes: the claim stops a second
resume, the key stops a second effect.

Messages are stored once per run, in order, so keeping every state of a long run costs
space linear in its length, not quadratic.

* :class:`MemoryStateStore`: in one process (tests, scripts).
* :class:`SqlStateStore`: any database SQLAlchemy speaks (SQLite, PostgreSQL), with the
  application's own engine; ``pip install 'tether[sql]'``. Its ``save_in`` and ``load_in``
  work in the caller's transaction, so an application stores a state together with its own
  record of it (both or neither).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tether.errors import StateError
from tether.messages import Message, message_from_dict, message_to_dict
from tether.outcomes import RunState

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine, Table

__all__ = ["MemoryStateStore", "SqlStateStore", "StateStore"]


@runtime_checkable
class StateStore(Protocol):
    """Saves run states and lets each be resumed once."""

    async def save(self, state: RunState) -> None:
        """Keep ``state`` as its run's latest (a newer version replaces an older one)."""
        ...

    async def load(self, run_id: str) -> RunState | None:
        """The latest state saved for ``run_id``, or ``None``."""
        ...

    async def claim(self, run_id: str, version: int) -> bool:
        """Atomically mark state ``version`` of ``run_id`` as being resumed: ``True`` for
        the first caller only."""
        ...


def digest(messages: Sequence[Message], start: str = "") -> str:
    """A hash chain over ``messages`` (continuing ``start``): equal only for equal
    transcripts, so a state that rewrites what a run already said is caught."""
    value = start
    for m in messages:
        text = json.dumps(message_to_dict(m), sort_keys=True, ensure_ascii=False, default=str)
        value = hashlib.sha256(f"{value}\n{text}".encode()).hexdigest()
    return value


def _continues(transcript: tuple[Message, ...], n: int, stored: str, run_id: str) -> None:
    """Check that a new state's transcript continues the ``n`` stored messages of its run."""
    if len(transcript) < n or digest(transcript[:n]) != stored:
        raise StateError(
            f"the state of run {run_id!r} does not continue the transcript already stored"
        )


class MemoryStateStore:
    """A :class:`StateStore` in this process's memory."""

    def __init__(self) -> None:
        self._messages: dict[str, list[Message]] = {}
        self._digests: dict[str, str] = {}
        self._states: dict[str, dict[str, Any]] = {}
        self._claimed: set[tuple[str, int]] = set()

    async def save(self, state: RunState) -> None:
        stored = self._messages.setdefault(state.run_id, [])
        n, run_id = len(stored), state.run_id
        _continues(state.transcript, n, self._digests.get(run_id, ""), run_id)
        stored.extend(state.transcript[n:])
        self._digests[run_id] = digest(state.transcript[n:], self._digests.get(run_id, ""))
        record = state.to_dict(transcript=False)
        record["length"] = len(state.transcript)
        self._states[run_id] = json.loads(json.dumps(record, default=str))

    async def load(self, run_id: str) -> RunState | None:
        record = self._states.get(run_id)
        if record is None:
            return None
        return RunState.from_dict(record, self._messages[run_id][: record["length"]])

    async def claim(self, run_id: str, version: int) -> bool:
        key = (run_id, version)
        if key in self._claimed:
            return False
        self._claimed.add(key)
        return True


class SqlStateStore:
    """A :class:`StateStore` in SQL tables (``tether_run_messages``, ``tether_run_states``,
    ``tether_run_claims``), created if missing. The claim is an ``INSERT`` on a primary
    key, atomic on every database; the calls run in a worker thread."""

    def __init__(self, engine: Engine, *, prefix: str = "tether_") -> None:
        from sqlalchemy import Column, Integer, MetaData, String, Table, Text, bindparam, select

        self.engine = engine
        meta = MetaData()
        self._messages: Table = Table(
            f"{prefix}run_messages",
            meta,
            Column("run_id", String(200), primary_key=True),
            Column("position", Integer, primary_key=True),
            Column("message", Text, nullable=False),
        )
        self._states: Table = Table(
            f"{prefix}run_states",
            meta,
            Column("run_id", String(200), primary_key=True),
            Column("version", Integer, nullable=False),
            Column("length", Integer, nullable=False),
            Column("digest", String(64), nullable=False),
            Column("state", Text, nullable=False),
        )
        self._claims: Table = Table(
            f"{prefix}run_claims",
            meta,
            Column("run_id", String(200), primary_key=True),
            Column("version", Integer, primary_key=True),
        )
        meta.create_all(engine)
        m, s = self._messages, self._states
        run_id: Any = bindparam("run_id_")
        self._head = select(s.c.length, s.c.digest).where(s.c.run_id == run_id)
        self._state = select(s.c.length, s.c.state).where(s.c.run_id == run_id)
        self._texts = (
            select(m.c.message)
            .where(m.c.run_id == run_id, m.c.position < bindparam("length_"))
            .order_by(m.c.position)
        )
        self._update = s.update().where(s.c.run_id == run_id)

    async def save(self, state: RunState) -> None:
        await asyncio.to_thread(self._save, state)

    async def load(self, run_id: str) -> RunState | None:
        return await asyncio.to_thread(self._load, run_id)

    async def claim(self, run_id: str, version: int) -> bool:
        return await asyncio.to_thread(self._claim, run_id, version)

    def _save(self, state: RunState) -> None:
        with self.engine.begin() as conn:
            self.save_in(conn, state)

    def _load(self, run_id: str) -> RunState | None:
        with self.engine.connect() as conn:
            return self.load_in(conn, run_id)

    def save_in(self, conn: Connection, state: RunState) -> None:
        """:meth:`save` in the caller's transaction (committed, or rolled back, with it)."""
        m, s = self._messages, self._states
        run_id = state.run_id
        row = conn.execute(self._head, {"run_id_": run_id}).first()
        n, stored = (row.length, row.digest) if row is not None else (0, "")
        _continues(state.transcript, n, stored, run_id)
        new = state.transcript[n:]
        if new:
            conn.execute(
                m.insert(),
                [
                    {
                        "run_id": run_id,
                        "position": n + i,
                        "message": json.dumps(message_to_dict(msg), ensure_ascii=False),
                    }
                    for i, msg in enumerate(new)
                ],
            )
        values = {
            "version": state.version,
            "length": len(state.transcript),
            "digest": digest(new, stored),
            "state": json.dumps(state.to_dict(transcript=False), default=str),
        }
        if row is None:
            conn.execute(s.insert(), {"run_id": run_id, **values})
        else:
            conn.execute(self._update, {"run_id_": run_id, **values})

    def load_in(self, conn: Connection, run_id: str) -> RunState | None:
        """:meth:`load` on the caller's connection (in its transaction, if one is open)."""
        row = conn.execute(self._state, {"run_id_": run_id}).first()
        if row is None:
            return None
        texts = conn.execute(self._texts, {"run_id_": run_id, "length_": row.length}).scalars()
        transcript = [message_from_dict(json.loads(t)) for t in texts]
        return RunState.from_dict(json.loads(row.state), transcript)

    def _claim(self, run_id: str, version: int) -> bool:
        from sqlalchemy.exc import IntegrityError

        try:
            with self.engine.begin() as conn:
                conn.execute(self._claims.insert(), {"run_id": run_id, "version": version})
        except IntegrityError:
            return False
        return True
