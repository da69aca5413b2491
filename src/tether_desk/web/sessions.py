"""Server-side sessions in the desk's database.

The cookie carries a random token; the ``web_sessions`` row is keyed by the token's
SHA-256. A session ends when its row is deleted: at logout, at "log out everywhere" (every
row of the account), when it has been idle too long, or at its absolute end. Logging in
always starts a new session (a new token) and ends the one the browser had.

A process keeps the sessions it has read for :attr:`WebSettings.session_recheck` (5 s by
default) instead of reading the row on every request (:mod:`tether_desk.web.kept_sessions`):
a session ended in this process stops working at once (the kept copy goes with the row);
one ended by another process (another ``--workers`` process) stops within that time. The
idle and absolute ends are checked against the clock on every request, kept copy or not.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import and_, bindparam, delete, func, select, update

from tether_desk.accounts import Principal
from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.models import Customer, Staff, WebSession
from tether_desk.web.kept_sessions import Kept, KeptSessions, kept_for
from tether_desk.web.settings import WebSettings

TOUCH_EVERY = timedelta(seconds=60)
"""How stale ``last_seen_at`` may get before a request writes it again (idle expiry is
accurate to this; it saves a write per request)."""


def session_id(token: str) -> str:
    """The row id of a cookie's token: its SHA-256, in hex."""
    return hashlib.sha256(token.encode()).hexdigest()


_LOAD = (
    select(
        WebSession.role,
        WebSession.account_id,
        WebSession.last_seen_at,
        WebSession.expires_at,
        func.coalesce(Customer.name, Staff.name),
        func.coalesce(Customer.email, Staff.email),
    )
    .outerjoin(Customer, and_(WebSession.role == "customer", Customer.id == WebSession.account_id))
    .outerjoin(Staff, and_(WebSession.role == "staff", Staff.id == WebSession.account_id))
    .where(WebSession.id == bindparam("id_"), WebSession.expires_at > bindparam("now_"))
)
_TOUCH = update(WebSession).where(WebSession.id == bindparam("id_"))


@dataclass(frozen=True, slots=True)
class SessionStore:
    """Create, read and end sessions."""

    db: Database
    settings: WebSettings
    monotonic: Callable[[], float] = time.monotonic
    """The clock the kept copies age by (a test moves it)."""
    own: KeptSessions | None = None
    """Copies of its own (with their own mapping of the counter, as another process
    has); ``None``: those every console of this process shares for this database."""
    kept: KeptSessions = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kept", self.own or kept_for(self.db))

    def create(self, who: Principal, previous: str | None = None) -> str:
        """Start a session for ``who`` (ending ``previous``, the browser's old token);
        returns the new cookie token."""
        token = secrets.token_urlsafe(32)
        now = utcnow()
        with self.db.write() as s:
            if previous:
                s.execute(delete(WebSession).where(WebSession.id == session_id(previous)))
            s.execute(delete(WebSession).where(WebSession.expires_at <= now))
            s.add(
                WebSession(
                    id=session_id(token),
                    role=who.role,
                    account_id=who.id,
                    created_at=now,
                    last_seen_at=now,
                    expires_at=now + self.settings.session_absolute,
                )
            )
        if previous:
            self.kept.ended()
        return token

    def load(self, token: str) -> Principal | None:
        """Who the token's live session belongs to, or ``None`` (ended, expired, unknown,
        or its account gone: an idle row is deleted). One indexed read, or none while the
        session read last is recent and no session has ended since (module docstring)."""
        key = session_id(token)
        now = utcnow()
        recheck = self.settings.session_recheck.total_seconds()
        kept = self.kept.get(key, self.monotonic(), recheck)
        if kept is None:
            ends = self.kept.now()  # before the row: an end after it drops the copy
            with self.db.read_connection() as c:
                row = c.execute(_LOAD, {"id_": key, "now_": now}).one_or_none()
            if row is None:
                return None
            role, account_id, seen, expires, name, email = row
            who = None
            if name is not None:
                who = Principal("staff" if role == "staff" else "customer", account_id, name, email)
            kept = Kept(who, seen, expires, self.monotonic(), ends)
            self.kept.put(key, kept)
        if now >= kept.expires:
            self.kept.copies.pop(key, None)  # the row is past its end: it cannot be read
            return None
        if now - kept.seen >= self.settings.session_idle:
            self.end(token)
            return None
        if now - kept.seen >= TOUCH_EVERY:
            with self.db.write_connection() as c:
                c.execute(_TOUCH, {"id_": key, "last_seen_at": now})
            kept.seen = now
        return kept.who

    def end(self, token: str) -> None:
        """End the token's session."""
        with self.db.write() as s:
            s.execute(delete(WebSession).where(WebSession.id == session_id(token)))
        self.kept.ended()

    def end_all(self, who: Principal) -> int:
        """End every session of ``who``'s account; returns how many."""
        with self.db.write() as s:
            done = s.execute(
                delete(WebSession).where(
                    WebSession.role == who.role, WebSession.account_id == who.id
                )
            )
            ended = int(done.rowcount or 0)  # type: ignore[attr-defined]
        self.kept.ended()
        return ended
