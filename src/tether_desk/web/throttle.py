"""Login throttling per account and per client address, in the desk's database.

Each failed login counts against two keys, ``account:<e-mail>`` and ``address:<ip>``.
Past its threshold a key is locked, first for ``login_lock``, then twice as long at each
further failure, up to ``login_lock_max``. A locked attempt is refused before the
password is looked at: no argon2 work is done for it. A successful login clears its
account's key (not the address's: one good account must not reset an address's count).
Counts are kept in the database, so several console processes share them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError

from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.errors import RateLimited
from tether_desk.models import LoginThrottle
from tether_desk.web.settings import WebSettings

FORGET_AFTER = timedelta(hours=24)
"""A key with no failure for this long starts again from zero (its row is deleted at the
next failure of any key)."""


def keys(email: str, address: str) -> tuple[str, str]:
    """The two keys one attempt counts against."""
    return f"account:{email.strip().lower()[:254]}", f"address:{address[:45]}"


@dataclass(frozen=True, slots=True)
class Throttle:
    """Checks and counts login attempts."""

    db: Database
    settings: WebSettings

    def check(self, email: str, address: str) -> None:
        """Raise :class:`RateLimited` if the account or the address is locked now."""
        now = utcnow()
        with self.db.read() as s:
            until = s.scalar(
                select(LoginThrottle.locked_until)
                .where(LoginThrottle.key.in_(keys(email, address)))
                .where(LoginThrottle.locked_until > now)
                .order_by(LoginThrottle.locked_until.desc())
                .limit(1)
            )
        if until is not None:
            raise _locked(until, now)

    def failed(self, email: str, address: str) -> None:
        """Count a failed attempt (and lock a key past its threshold)."""
        account, by_address = keys(email, address)
        limits = {
            account: self.settings.login_account_failures,
            by_address: self.settings.login_address_failures,
        }
        for attempt in range(2):  # a concurrent first failure may insert the same key
            try:
                self._count(limits)
                return
            except IntegrityError:
                if attempt:
                    raise

    def succeeded(self, email: str, address: str) -> None:
        """Forget the account's failures after a successful login."""
        with self.db.write() as s:
            s.execute(delete(LoginThrottle).where(LoginThrottle.key == keys(email, address)[0]))

    def _count(self, limits: dict[str, int]) -> None:
        now = utcnow()
        with self.db.write() as s:
            s.execute(delete(LoginThrottle).where(LoginThrottle.last_failure < now - FORGET_AFTER))
            for key, threshold in limits.items():
                row = s.get(LoginThrottle, key)
                if row is None:
                    row = LoginThrottle(key=key, failures=0, last_failure=now)
                    s.add(row)
                elif now - row.last_failure >= FORGET_AFTER:
                    row.failures = 0
                row.failures += 1
                row.last_failure = now
                over = row.failures - threshold
                if over >= 0:
                    lock = self.settings.login_lock * (2 ** min(over, 20))
                    row.locked_until = now + min(lock, self.settings.login_lock_max)


def _locked(until: datetime, now: datetime) -> RateLimited:
    seconds = max(1, math.ceil((until - now).total_seconds()))
    wait = f"{seconds} seconds" if seconds < 120 else f"{math.ceil(seconds / 60)} minutes"
    return RateLimited(
        f"Too many failed logins for this account or from this address; try again in {wait}.",
        seconds,
    )
