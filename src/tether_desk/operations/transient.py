"""Transient database faults (locked, disk full, I/O error, connection lost), and a
retry with exponential backoff for the work that meets one (see
:mod:`tether_desk.operations.healing`)."""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

log = logging.getLogger("tether_desk")
T = TypeVar("T")
TRANSIENT_TEXT = (
    "database is locked",
    "database or disk is full",
    "disk i/o error",
    "no space left on device",
    "server closed the connection",
    "connection refused",
    "terminating connection",
    "could not connect",
    "connection is closed",
    "connection timed out",
    "the database system is starting up",
    "the database system is shutting down",
)


def is_transient(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what it wraps) is a database fault that may clear by itself."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT):
            return True
        text = str(exc).lower()
        if any(t in text for t in TRANSIENT_TEXT):
            return True
        exc = getattr(exc, "orig", None) or exc.__cause__ or exc.__context__
        seen += 1
    return False


async def retry_transient(
    attempt: Callable[[], Awaitable[T]],
    *,
    tries: int = 8,
    first_delay: float = 0.05,
    max_delay: float = 5.0,
) -> T:
    """``await attempt()``, again after a transient database error (delays doubling from
    ``first_delay`` up to ``max_delay``, ``tries`` in all); other errors at once."""
    delay = first_delay
    for left in range(tries - 1, -1, -1):
        try:
            return await attempt()
        except Exception as exc:
            if left == 0 or not is_transient(exc):
                raise
            log.warning("transient database error, retrying in %.2f s: %s", delay, exc)
        await asyncio.sleep(delay)
        delay = min(delay * 2, max_delay)
    raise AssertionError("unreachable")
