"""One process runs a SQLite desk's tickets: an exclusive lock on a file beside the
database (``NAME.db.lock``, ``fcntl.flock``), held while the process lives.

A second ``tether serve`` or ``tether worker`` on the same file would take over runs the
first one is executing after either restarts; it refuses instead, naming the holder. A
console-only process (``--no-process``) takes no lock. The kernel drops the lock when its
holder dies, however it dies, so a killed process never leaves a stale one behind.
PostgreSQL needs none: workers share its queue, each under its own executor id.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from sqlalchemy.engine import make_url

from tether.errors import ConfigError


def lock_path(database_url: str) -> Path | None:
    """The lock file of a SQLite desk (``None`` for a server database)."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    path = Path(url.database)
    return path.with_name(path.name + ".lock")


class WriterLock:
    """The lock of one SQLite desk, taken by :meth:`acquire`, dropped by :meth:`release`
    (or when the process ends)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, or raise :class:`~tether.errors.ConfigError` naming its holder."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            database = self.path.name.removesuffix(".lock")
            raise ConfigError(
                f"another process (pid {holder}) already runs the tickets of {database}; "
                "stop it first, or start this one with --no-process as a console only"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (the file stays: removing it would race the next holder)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def hold_writer_lock(database_url: str) -> WriterLock | None:
    """Take the lock of a SQLite desk (``None`` for PostgreSQL); see the module doc."""
    path = lock_path(database_url)
    if path is None:
        return None
    lock = WriterLock(path)
    lock.acquire()
    return lock
