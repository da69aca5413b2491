"""The sessions a process has read recently, shared by every console on one database in
the process (:class:`tether_desk.web.sessions.SessionStore` reads and ends them).

Each copy remembers the database's shared count of ended sessions
(:mod:`tether_desk.web.ends_epoch`) as read before its row was. A copy is believed only
while that count is unchanged, i.e. while no session has been ended by any process on
this host since it was read, and for at most :attr:`WebSettings.session_recheck` (which
bounds how long a change to the account itself goes unseen). So a read that overlapped an
end keeps nothing, and any end anywhere drops every copy at the next request. Without the
shared count (PostgreSQL, an in-memory database, a file that cannot be had) nothing is kept.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from datetime import datetime

from tether_desk.accounts import Principal
from tether_desk.db import Database
from tether_desk.web.ends_epoch import EndsEpoch, ends_epoch_for

KEPT_MAX = 4096
"""Sessions kept at most (past it, every copy is dropped and read anew)."""


@dataclass(slots=True)
class Kept:
    """A session as last read: who (``None``: its account is gone), when it was last
    seen and ends, when (monotonic seconds) it was read, and the count of ends then."""

    who: Principal | None
    seen: datetime
    expires: datetime
    read_at: float
    ends: int


class KeptSessions:
    """Copies of sessions by row id, believed while ``ends`` (``None``: keep none) holds
    the count each was read at."""

    def __init__(self, ends: EndsEpoch | None) -> None:
        self.copies: dict[str, Kept] = {}
        self.ends = ends
        self.lock = threading.Lock()

    def now(self) -> int:
        """The count of ends now (-1 when nothing is kept)."""
        return -1 if self.ends is None else self.ends.read()

    def get(self, key: str, now: float, recheck: float) -> Kept | None:
        """The copy of session ``key`` if no session ended since it was read and it was
        read less than ``recheck`` s ago."""
        kept = self.copies.get(key)
        if kept is None:
            return None
        ends = self.ends
        if ends is None or kept.ends != ends.read():  # one ended since: all are stale
            with self.lock:
                self.copies.clear()
            return None
        if now - kept.read_at < recheck:
            return kept
        self.copies.pop(key, None)
        return None

    def put(self, key: str, kept: Kept) -> None:
        """Keep ``kept`` (not if a session ended since it was read, or nothing is kept)."""
        if self.ends is None:
            return
        with self.lock:
            if kept.ends != self.ends.read():
                return
            if len(self.copies) >= KEPT_MAX:
                self.copies.clear()
            self.copies[key] = kept

    def ended(self) -> None:
        """Sessions were just ended (call it after their rows went): tell every process."""
        if self.ends is None:
            return
        self.ends.bump()
        with self.lock:
            self.copies.clear()


_SHARED: weakref.WeakKeyDictionary[Database, KeptSessions] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def kept_for(db: Database) -> KeptSessions:
    """The copies every console of this process keeps for ``db``."""
    with _SHARED_LOCK:
        kept = _SHARED.get(db)
        if kept is None:
            kept = _SHARED[db] = KeptSessions(ends_epoch_for(db))
        return kept
