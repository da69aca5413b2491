"""A :class:`~tether.state_store.StateStore` in SQL tables, through SQLAlchemy.

Two tables, created if missing (safely when several processes start at once):
``tether_run_messages`` (each message once, as the canonical text its hash chain covers)
and ``tether_run_heads`` (one row per run: its sequence, its lease, the length and digest of
its stored transcript and the sealed state without the transcript). Claim, renewal, release
and finish are each one conditional ``UPDATE`` on the run's row, atomic on every database.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from tether.errors import StateError
from tether.messages import Message, message_from_dict
from tether.run_state import RunState, message_text
from tether.state_seal import chain
from tether.state_store import LEASE_SECONDS, Lease, lost, new_lease

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine, Table

__all__ = ["SqlStateStore"]
T = TypeVar("T")
CACHED_RUNS = 256
"""Runs whose messages a store keeps parsed, so loading one reads only its new messages."""


class SqlStateStore:
    """A state store on ``engine`` (tables ``{prefix}run_messages`` and
    ``{prefix}run_heads``); the calls run in a worker thread, or in the caller's thread when
    ``inline`` (default: only for an in-memory SQLite database, which lives in one
    connection; an application whose own writes on a local SQLite file block its loop
    anyway saves a thread hop per call)."""

    def __init__(
        self,
        engine: Engine,
        *,
        prefix: str = "tether_",
        lease_seconds: float = LEASE_SECONDS,
        inline: bool | None = None,
    ) -> None:
        from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text

        self.engine = engine
        self.lease_seconds = lease_seconds
        meta = MetaData()
        self._messages: Table = Table(
            f"{prefix}run_messages",
            meta,
            Column("run_id", String(200), primary_key=True),
            Column("position", Integer, primary_key=True),
            Column("message", Text, nullable=False),
        )
        self._heads: Table = Table(
            f"{prefix}run_heads",
            meta,
            Column("run_id", String(200), primary_key=True),
            Column("sequence", Integer, nullable=False),
            Column("status", String(10), nullable=False),
            Column("owner", String(64), nullable=True),
            Column("expires_at", Float, nullable=True),
            Column("length", Integer, nullable=False),
            Column("digest", String(64), nullable=False),
            Column("state", Text, nullable=False),
        )
        self._q = _Statements(self._heads, self._messages)
        self._inline = _in_memory_sqlite(engine) if inline is None else inline
        self._cache: OrderedDict[str, tuple[str, tuple[Message, ...]]] = OrderedDict()
        self._cache_lock = threading.Lock()
        _create_tables(meta, engine)

    # --- the protocol -------------------------------------------------------------------

    async def save(self, state: RunState) -> None:
        await self._call(self._in_transaction, self.save_in, state)

    async def load(self, run_id: str) -> RunState | None:
        return await self._call(self._connected, self.load_in, run_id)

    async def claim(self, run_id: str, sequence: int) -> Lease | None:
        lease = new_lease(run_id, sequence, self.lease_seconds)
        params = {
            "run_id_": run_id,
            "sequence_": sequence,
            "now_": time.time(),
            "owner": lease.owner,
            "expires_at": lease.expires_at,
        }
        count = await self._call(self._in_transaction, _rowcount, self._q.claim, params)
        return lease if count == 1 else None

    async def renew(self, lease: Lease) -> Lease | None:
        fresh = Lease(lease.run_id, lease.sequence, lease.owner, time.time() + self.lease_seconds)
        params = {**_held(lease), "expires_at": fresh.expires_at}
        count = await self._call(self._in_transaction, _rowcount, self._q.held, params)
        return fresh if count == 1 else None

    async def release(self, lease: Lease) -> None:
        params = {**_held(lease), "status": "waiting", "owner": None, "expires_at": None}
        await self._call(self._in_transaction, _rowcount, self._q.held, params)

    async def finish(self, lease: Lease, state: RunState | None) -> None:
        await self._call(self._in_transaction, self.finish_in, lease, state)

    # --- in the caller's transaction ----------------------------------------------------

    def save_in(self, conn: Connection, state: RunState) -> None:
        """:meth:`save` in the caller's transaction (committed, or rolled back, with it)."""
        record = json.dumps(state.to_dict(transcript=False), ensure_ascii=False, default=str)
        row = self._head(conn, state.run_id)
        if row is None:
            self._append(conn, state, 0, "")
            conn.execute(self._q.insert, {"run_id": state.run_id, **self._values(state, record)})
            return
        if row.sequence == state.version and row.state == record:
            return
        held = row.status == "claimed" and (row.expires_at or 0) > time.time()
        if row.sequence >= state.version or held or row.status == "ended":
            raise StateError(
                f"run {state.run_id} already has state {row.sequence} stored; a later state is "
                "stored by the resume that claimed it"
            )
        self._append(conn, state, row.length, row.digest)
        params = {"run_id_": state.run_id, "sequence_": row.sequence}
        if conn.execute(self._q.next, {**params, **self._values(state, record)}).rowcount != 1:
            raise StateError(f"run {state.run_id} changed while its state was saved; try again")

    def finish_in(self, conn: Connection, lease: Lease, state: RunState | None) -> None:
        """:meth:`finish` in the caller's transaction."""
        row = self._head(conn, lease.run_id)
        if row is None or row.owner != lease.owner or row.sequence != lease.sequence:
            raise lost(lease)
        if state is None:
            values: dict[str, Any] = {"status": "ended", "owner": None, "expires_at": None}
        else:
            if state.run_id != lease.run_id or state.version <= lease.sequence:
                raise StateError(f"state {state.state_id} does not follow {lease.sequence}")
            record = json.dumps(state.to_dict(transcript=False), ensure_ascii=False, default=str)
            self._append(conn, state, row.length, row.digest)
            values = self._values(state, record)
        if conn.execute(self._q.held, {**_held(lease), **values}).rowcount != 1:
            raise lost(lease)

    def load_in(self, conn: Connection, run_id: str) -> RunState | None:
        """:meth:`load` on the caller's connection (in its transaction, if one is open)."""
        row = conn.execute(self._q.load, {"run_id_": run_id}).first()
        if row is None or row.status == "ended":
            return None
        known, start = self._known(run_id, row.length)  # our own copy of its first messages
        try:
            state = self._read(conn, run_id, row, known, start)
        except StateError:
            if not known:
                raise
            state = self._read(conn, run_id, row, (), "")  # a copy of a save rolled back
        self._remember(run_id, state.transcript_digest()[1], state.transcript)
        return state

    def _read(
        self, conn: Connection, run_id: str, row: Any, known: tuple[Message, ...], start: str
    ) -> RunState:
        texts: list[str] = []
        if len(known) < row.length:  # else every message is known: nothing to read
            params = {"run_id_": run_id, "from_": len(known), "to_": row.length}
            texts = list(conn.execute(self._q.texts, params).scalars())
        digest = (len(known) + len(texts), chain(texts, start))
        try:
            record = json.loads(row.state)
            transcript = [*known, *(message_from_dict(json.loads(t)) for t in texts)]
        except (ValueError, TypeError, RecursionError) as exc:
            raise StateError(f"cannot read stored run state of {run_id!r}: {exc}") from None
        return RunState.from_record(record, transcript, digest)

    # --- helpers ------------------------------------------------------------------------

    def _remember(self, run_id: str, digest: str, transcript: tuple[Message, ...]) -> None:
        with self._cache_lock:
            self._cache[run_id] = (digest, transcript)
            self._cache.move_to_end(run_id)
            while len(self._cache) > CACHED_RUNS:
                self._cache.popitem(last=False)

    def _known(self, run_id: str, length: int) -> tuple[tuple[Message, ...], str]:
        """The messages of ``run_id`` this store saved or loaded itself (at most
        ``length``) and their chain: verified once, never read from the database again."""
        with self._cache_lock:
            cached = self._cache.get(run_id)
        if cached is None or len(cached[1]) > length:
            return (), ""
        return cached[1], cached[0]

    def _head(self, conn: Connection, run_id: str) -> Any:
        return conn.execute(self._q.head, {"run_id_": run_id}).first()

    def _append(self, conn: Connection, state: RunState, n: int, stored: str) -> None:
        """Insert the messages of ``state`` after the ``n`` stored ones (whose chain is
        ``stored``), checking that it continues them and that its seal names the result."""
        transcript = state.transcript
        if len(transcript) < n or state.digest_at(n) != stored:
            raise StateError(
                f"the state of run {state.run_id!r} does not continue the transcript already stored"
            )
        texts = [message_text(msg) for msg in transcript[n:]]
        if chain(texts, stored) != state.transcript_digest()[1]:
            raise StateError(f"the state of run {state.run_id!r} does not match its seal")
        if texts:
            conn.execute(
                self._q.insert_messages,
                [
                    {"run_id": state.run_id, "position": n + i, "message": text}
                    for i, text in enumerate(texts)
                ],
            )
        self._remember(state.run_id, state.transcript_digest()[1], state.transcript)

    @staticmethod
    def _values(state: RunState, record: str) -> dict[str, Any]:
        length, digest = state.transcript_digest()
        return {
            "sequence": state.version,
            "status": "waiting",
            "owner": None,
            "expires_at": None,
            "length": length,
            "digest": digest,
            "state": record,
        }

    def _in_transaction(self, fn: Callable[..., T], *args: Any) -> T:
        with self.engine.begin() as conn:
            return fn(conn, *args)

    def _connected(self, fn: Callable[..., T], *args: Any) -> T:
        with self.engine.connect() as conn:
            return fn(conn, *args)

    async def _call(self, how: Callable[..., T], *args: Any) -> T:
        if self._inline:
            return how(*args)
        return await asyncio.to_thread(how, *args)


class _Statements:
    """The store's statements, built once with bound parameters (a call only looks its
    compiled form up). The row's new values are passed as parameters named after its
    columns; the ``WHERE`` parameters end in ``_``."""

    def __init__(self, heads: Table, messages: Table) -> None:
        from sqlalchemy import bindparam, select

        h, m = heads.c, messages.c
        run = h.run_id == bindparam("run_id_")
        at = h.sequence == bindparam("sequence_")
        cols = (h.sequence, h.status, h.owner, h.expires_at, h.length, h.digest, h.state)
        self.head = select(*cols).where(run)
        self.load = select(h.length, h.state, h.status).where(run)
        self.texts = (
            select(m.message)
            .where(
                m.run_id == bindparam("run_id_"),
                m.position >= bindparam("from_"),
                m.position < bindparam("to_"),
            )
            .order_by(m.position)
        )
        self.insert = heads.insert()
        self.insert_messages = messages.insert()
        self.next = heads.update().where(run, at)
        """Store the next state over ``sequence_``."""
        expired = (h.status == "claimed") & (h.expires_at < bindparam("now_"))
        self.claim = (
            heads.update()
            .where(run, at, (h.status == "waiting") | expired)
            .values(status="claimed")
        )
        self.held = heads.update().where(
            run, at, h.owner == bindparam("owner_"), h.status == "claimed"
        )
        """Change the row of a lease still held (:func:`_held` gives its parameters)."""


def _held(lease: Lease) -> dict[str, Any]:
    return {"run_id_": lease.run_id, "sequence_": lease.sequence, "owner_": lease.owner}


def _rowcount(conn: Connection, stmt: Any, params: dict[str, Any]) -> int:
    return int(conn.execute(stmt, params).rowcount)


def _in_memory_sqlite(engine: Engine) -> bool:
    url = engine.url
    return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")


def _create_tables(meta: Any, engine: Engine) -> None:
    """Create the tables if missing. Two processes doing so at once on a fresh database
    race between the check and the ``CREATE``: the loser sees the winner's tables on retry."""
    from sqlalchemy.exc import DBAPIError

    for attempt in range(10):
        try:
            meta.create_all(engine, checkfirst=True)
            return
        except DBAPIError:
            if attempt == 9:
                raise
            time.sleep(0.02 * (attempt + 1))
