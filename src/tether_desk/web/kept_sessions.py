"""The sessions a process has read recently, shared by every console on one database in
the process (:class:`tether_desk.web.sessions.SessionStore` reads and ends them).

A copy is believed for :attr:`WebSettings.session_recheck`; ending a session drops its
copy after the row is gone, and a read that overlapped an end keeps nothing (it may have
read the row just before it was deleted).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from tether_desk.accounts import Principal
from tether_desk.db import Database

KEPT_MAX = 4096
"""Sessions kept at most (past it, every copy is dropped and read anew)."""


@dataclass(slots=True)
class Kept:
    """A session as last read: who (``None``: its account is gone), when it was last
    seen and ends, and when (monotonic seconds) it was read."""

    who: Principal | None
    seen: datetime
    expires: datetime
    read_at: float


class KeptSessions:
    """Copies of sessions by row id, and how many sessions were ended so far."""

    def __init__(self) -> None:
        self.copies: dict[str, Kept] = {}
        self.ends = 0
        self.lock = threading.Lock()

    def get(self, key: str, now: float, recheck: float) -> Kept | None:
        """The copy of session ``key`` if it was read less than ``recheck`` s ago."""
        kept = self.copies.get(key)
        if kept is None or now - kept.read_at < recheck:
            return kept
        self.copies.pop(key, None)
        return None

    def put(self, key: str, kept: Kept, ends: int) -> None:
        """Keep ``kept``, read when :attr:`ends` was ``ends`` (not if a session ended since)."""
        with self.lock:
            if self.ends != ends:
                return
            if len(self.copies) >= KEPT_MAX:
                self.copies.clear()
            self.copies[key] = kept

    def forget(self, ended: Callable[[str, Kept], bool]) -> None:
        """Drop the copies of the sessions just ended (call it after their rows went)."""
        with self.lock:
            self.ends += 1
            for key in [k for k, v in self.copies.items() if ended(k, v)]:
                del self.copies[key]


_SHARED: weakref.WeakKeyDictionary[Database, KeptSessions] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def kept_for(db: Database) -> KeptSessions:
    """The copies every console of this process keeps for ``db``."""
    with _SHARED_LOCK:
        kept = _SHARED.get(db)
        if kept is None:
            kept = _SHARED[db] = KeptSessions()
        return kept
