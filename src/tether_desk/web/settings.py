"""How the console is deployed: TLS, proxies, sessions and rate limits, as frozen data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

SECURE_ENV = "TETHER_DESK_SECURE"
HSTS_ENV = "TETHER_DESK_HSTS_SECONDS"
PROXIES_ENV = "TETHER_DESK_TRUSTED_PROXIES"


@dataclass(frozen=True, slots=True)
class WebSettings:
    """The console's deployment settings; the defaults suit ``http://127.0.0.1``."""

    secure_cookies: bool = False
    """Behind TLS: cookies get ``Secure`` and the ``__Host-`` name prefix (no sibling
    subdomain or plain-HTTP page can set them)."""
    hsts_seconds: int = 0
    """``Strict-Transport-Security: max-age=...`` on every response (0: not sent)."""
    trusted_proxies: tuple[str, ...] = ()
    """Addresses of reverse proxies whose ``X-Forwarded-For``/``-Proto`` are believed
    (the client address for throttling, the scheme for the origin check)."""
    session_idle: timedelta = timedelta(hours=1)
    """A session unused this long ends."""
    session_absolute: timedelta = timedelta(hours=8)
    """A session ends this long after login, used or not."""
    session_recheck: timedelta = timedelta(seconds=5)
    """How long a process believes a session it has read before reading it again: a
    session ended in another process (another ``--workers`` process) still works here up
    to this long; ended in this process, it stops at once. 0: read it on every request."""
    login_account_failures: int = 5
    """Failed logins for one e-mail before it is locked for a while."""
    login_address_failures: int = 20
    """Failed logins from one client address before it is locked for a while."""
    login_lock: timedelta = timedelta(seconds=30)
    """The first lock's length; each further failure doubles it."""
    login_lock_max: timedelta = timedelta(minutes=15)
    """The longest lock."""
    tickets_per_window: int = 5
    """Tickets one customer may open per ``ticket_window``."""
    ticket_window: timedelta = timedelta(minutes=10)

    @property
    def cookie_prefix(self) -> str:
        """``__Host-`` behind TLS, else nothing."""
        return "__Host-" if self.secure_cookies else ""

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WebSettings:
        """Settings from a deployment's environment: ``TETHER_DESK_SECURE=1`` (served over
        TLS: Secure ``__Host-`` cookies and HSTS for a year unless
        ``TETHER_DESK_HSTS_SECONDS`` says otherwise), ``TETHER_DESK_TRUSTED_PROXIES``
        (comma-separated proxy addresses whose forwarded headers are believed)."""
        secure = env.get(SECURE_ENV, "").strip().lower() in ("1", "true", "yes", "on")
        hsts = env.get(HSTS_ENV, "").strip()
        proxies = tuple(p.strip() for p in env.get(PROXIES_ENV, "").split(",") if p.strip())
        return cls(
            secure_cookies=secure,
            hsts_seconds=int(hsts) if hsts.isdigit() else (31_536_000 if secure else 0),
            trusted_proxies=proxies,
        )
