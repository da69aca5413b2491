"""Where run states wait for their approvals; the store owns each run's sequence.

A run that ends ``awaiting_approval`` leaves a sealed :class:`~tether.run_state.RunState`
numbered by ``version`` (its sequence). The store's row for the run, not the state, holds
the sequence a resume may start from: a resume is a compare-and-set on ``(run_id,
sequence)`` (:meth:`StateStore.claim`). Two approvers clicking at once, a retried request or
an old state offered again: only one claim wins, the others are refused.

A claim is a lease, not a one-shot mark. The resume that holds it ends it by saving the
run's next state or marking the run ended (:meth:`StateStore.finish`); a resume that is
cancelled gives it back (:meth:`StateStore.release`), and one whose process dies lets it
expire (``lease_seconds``), so the same state can be resumed again. A call that ran before
such a stop may then run again: tools key their effect on ``ctx.idempotency_key`` (the run
id and the call id, the same in every resume).

Messages are stored once per run, in order, with a hash chain over them that the state's
seal covers: a save writes and hashes only the new messages, a load hashes the stored text.

* :class:`MemoryStateStore`: in one process (tests, scripts).
* :class:`SqlStateStore`: any database SQLAlchemy speaks (SQLite, PostgreSQL), with the
  application's own engine; ``pip install 'tether[sql]'``. Its ``save_in`` and ``load_in``
  work in the caller's transaction, so an application stores a state together with its own
  record of it (both or neither).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tether.errors import StateClaimed, StateError
from tether.run_state import RunState

if TYPE_CHECKING:
    from tether.sql_state_store import SqlStateStore

__all__ = ["Lease", "MemoryStateStore", "SqlStateStore", "StateStore", "leased"]

LEASE_SECONDS = 300.0
"""How long a claim lasts unless renewed (a resume renews it while it runs)."""


@dataclass(frozen=True, slots=True)
class Lease:
    """A claim on state ``sequence`` of ``run_id``, held by ``owner`` until ``expires_at``
    (seconds since the epoch)."""

    run_id: str
    sequence: int
    owner: str
    expires_at: float


@runtime_checkable
class StateStore(Protocol):
    """Keeps each run's latest state and sequence; leases a state to one resume at a time."""

    lease_seconds: float

    async def save(self, state: RunState) -> None:
        """Keep ``state`` as its run's first state, or as the next one of a run resumed
        without a claim; saving the stored state again changes nothing."""
        ...

    async def load(self, run_id: str) -> RunState | None:
        """The state waiting for ``run_id`` (``None`` if none, or if the run ended)."""
        ...

    async def claim(self, run_id: str, sequence: int) -> Lease | None:
        """Lease state ``sequence`` of ``run_id`` if it is the stored one and nobody holds
        it (or the holder's lease expired); ``None`` otherwise."""
        ...

    async def renew(self, lease: Lease) -> Lease | None:
        """Extend ``lease``; ``None`` if it was lost."""
        ...

    async def release(self, lease: Lease) -> None:
        """Give ``lease`` back: the state can be claimed again at once."""
        ...

    async def finish(self, lease: Lease, state: RunState | None) -> None:
        """End ``lease``: store the run's next ``state``, or (``None``) mark the run ended.
        :class:`StateError` if the lease was lost meanwhile."""
        ...


def new_lease(run_id: str, sequence: int, seconds: float) -> Lease:
    """A fresh lease for ``seconds`` from now."""
    return Lease(run_id, sequence, secrets.token_hex(16), time.time() + seconds)


def lost(lease: Lease) -> StateClaimed:
    """The error of a resume whose lease was taken over."""
    return StateClaimed(
        f"the claim on state {lease.run_id}:{lease.sequence} was lost (it expired and another "
        "resume took it); this resume's outcome was not stored"
    )


def not_current(run_id: str, sequence: int) -> StateClaimed:
    """The error of a claim that lost."""
    return StateClaimed(
        f"state {run_id}:{sequence} was already resumed or is being resumed; load the run's "
        "latest state"
    )


@asynccontextmanager
async def leased(store: StateStore, state: RunState) -> AsyncIterator[Lease]:
    """Hold the lease on ``state`` while the block runs, renewing it; give it back if the
    block raises or is cancelled. The block ends the lease with :meth:`StateStore.finish`."""
    lease = await store.claim(state.run_id, state.version)
    if lease is None:
        raise not_current(state.run_id, state.version)
    holder = _Holder(lease)
    renewer = asyncio.ensure_future(_renew(store, holder))
    try:
        yield lease
    except BaseException:
        renewer.cancel()
        await asyncio.shield(store.release(holder.lease))
        raise
    renewer.cancel()


@dataclass(slots=True)
class _Holder:
    lease: Lease


async def _renew(store: StateStore, holder: _Holder) -> None:
    while True:
        await asyncio.sleep(store.lease_seconds / 3)
        renewed = await store.renew(holder.lease)
        if renewed is None:
            return
        holder.lease = renewed


@dataclass(slots=True)
class _Head:
    state: RunState
    status: str = "waiting"
    lease: Lease | None = None
    ended: bool = field(default=False)


class MemoryStateStore:
    """A :class:`StateStore` in this process's memory (states stay objects: a state sealed
    with a key of this process alone is accepted here)."""

    def __init__(self, *, lease_seconds: float = LEASE_SECONDS) -> None:
        self.lease_seconds = lease_seconds
        self._heads: dict[str, _Head] = {}

    async def save(self, state: RunState) -> None:
        head = self._heads.get(state.run_id)
        if head is None:
            self._heads[state.run_id] = _Head(state)
        elif head.state.version == state.version and head.state == state:
            return
        elif head.state.version < state.version and not self._held(head) and not head.ended:
            self._heads[state.run_id] = _Head(state)
        else:
            raise StateError(
                f"run {state.run_id} already has state {head.state.version} stored; a later "
                "state is stored by the resume that claimed it"
            )

    async def load(self, run_id: str) -> RunState | None:
        head = self._heads.get(run_id)
        return None if head is None or head.ended else head.state

    async def claim(self, run_id: str, sequence: int) -> Lease | None:
        head = self._heads.get(run_id)
        if head is None or head.ended or head.state.version != sequence or self._held(head):
            return None
        head.lease = new_lease(run_id, sequence, self.lease_seconds)
        return head.lease

    async def renew(self, lease: Lease) -> Lease | None:
        head = self._heads.get(lease.run_id)
        if head is None or head.lease is None or head.lease.owner != lease.owner:
            return None
        head.lease = Lease(
            lease.run_id, lease.sequence, lease.owner, time.time() + self.lease_seconds
        )
        return head.lease

    async def release(self, lease: Lease) -> None:
        head = self._heads.get(lease.run_id)
        if head is not None and head.lease is not None and head.lease.owner == lease.owner:
            head.lease = None

    async def finish(self, lease: Lease, state: RunState | None) -> None:
        head = self._heads.get(lease.run_id)
        if head is None or head.lease is None or head.lease.owner != lease.owner:
            raise lost(lease)
        if state is None:
            head.ended, head.lease = True, None
            return
        if state.run_id != lease.run_id or state.version <= lease.sequence:
            raise StateError(f"state {state.state_id} does not follow {lease.sequence}")
        self._heads[lease.run_id] = _Head(state)

    @staticmethod
    def _held(head: _Head) -> bool:
        return head.lease is not None and head.lease.expires_at > time.time()


def __getattr__(name: str) -> Any:
    if name == "SqlStateStore":  # kept importable from here; lives in its own module
        from tether.sql_state_store import SqlStateStore

        return SqlStateStore
    raise AttributeError(name)
