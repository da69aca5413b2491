"""How many sessions were ended on a SQLite database, shared by every process on this host.

A 64-bit counter in a file beside the database (``<database file>.sessions-epoch``),
mapped into each process: every end of a session adds one after its row is deleted, and a
process believes a session it kept only while the counter still holds the value it read
before reading the row (:mod:`tether_desk.web.kept_sessions`). Reading it is one aligned
64-bit load from the mapping (no system call); adding one is done under a lock held by
one thread of one process at a time (a ``threading`` lock per file in the process and
``fcntl.lockf``, whose locks belong to the process: a forked child does not share its
parent's), so the counter never goes back to a value it held.

The file is opened without following a symbolic link and must be a regular file of 8
bytes owned by the database file's owner (who can forge sessions anyway; one that root
makes is handed to that owner), with one link and no access for group or others. When it
cannot be had (an in-memory database, PostgreSQL, a read-only directory, a full disk, a
planted link or any other wrong file), :func:`ends_epoch_for` returns ``None`` and the
sessions are read on every request. A process that cannot open it (one of another,
non-root user that may write the database) ends sessions without adding one: copies
elsewhere then go only after :attr:`WebSettings.session_recheck`.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import stat
import threading
import weakref
from pathlib import Path

from sqlalchemy.engine import make_url

from tether_desk.db import Database

log = logging.getLogger(__name__)

SUFFIX = ".sessions-epoch"
SIZE = 8


class EndsEpoch:
    """The mapped counter of one database file."""

    def __init__(self, path: Path, owner: tuple[int, int]) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
            try:
                info = os.fstat(fd)
                if info.st_size == 0 and info.st_uid == os.geteuid() != owner[0]:
                    os.fchown(fd, *owner)  # root made it: it is the database owner's
                    info = os.fstat(fd)
                _check(info, path, owner[0])
                if info.st_size == 0:  # new: write it (a mapped hole could fault on a full disk)
                    if os.pwrite(fd, bytes(SIZE), 0) != SIZE:
                        raise OSError(f"{path}: short write")
                    os.fsync(fd)
                elif info.st_size != SIZE:
                    raise OSError(f"{path}: {info.st_size} bytes, not {SIZE}")
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN)
            self._map = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._word = memoryview(self._map).cast("Q")  # one aligned 64-bit word
        with _LOCKS_LOCK:
            self._lock = _LOCKS.setdefault((info.st_dev, info.st_ino), threading.Lock())
        self.path = path
        weakref.finalize(self, _close, self._word, self._map, fd)

    def read(self) -> int:
        """The counter now."""
        return self._word[0]

    def bump(self) -> None:
        """Add one (call it after the ended sessions' rows are deleted)."""
        with self._lock:
            fcntl.lockf(self._fd, fcntl.LOCK_EX)
            try:
                self._word[0] = (self._word[0] + 1) & 0xFFFF_FFFF_FFFF_FFFF
            finally:
                fcntl.lockf(self._fd, fcntl.LOCK_UN)


_LOCKS: weakref.WeakValueDictionary[tuple[int, int], threading.Lock]
_LOCKS = weakref.WeakValueDictionary()
"""One lock per counter file in the process (every mapping of it bumps under it)."""
_LOCKS_LOCK = threading.Lock()


def _check(info: os.stat_result, path: Path, uid: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise OSError(f"{path}: not a regular file")
    if info.st_uid != uid:
        raise OSError(f"{path}: owned by uid {info.st_uid}, not {uid}")
    if info.st_nlink != 1:
        raise OSError(f"{path}: {info.st_nlink} links")
    if info.st_mode & 0o077:
        raise OSError(f"{path}: mode {stat.S_IMODE(info.st_mode):o} (group or others)")


def _close(word: memoryview, mapped: mmap.mmap, fd: int) -> None:
    word.release()
    mapped.close()
    os.close(fd)


def epoch_path(db: Database) -> Path | None:
    """Where ``db``'s counter lives; ``None`` if it has none (not a SQLite file)."""
    if db.dialect != "sqlite":
        return None
    url = make_url(db.url)
    name = url.database
    if not name or name == ":memory:" or name.startswith("file:") or "mode" in url.query:
        return None
    return Path(os.path.realpath(name) + SUFFIX)


def ends_epoch_for(db: Database) -> EndsEpoch | None:
    """A new mapping of ``db``'s counter; ``None`` (logged) if it cannot be had."""
    path = epoch_path(db)
    if path is None:
        return None
    try:
        database = os.stat(path.with_name(path.name.removesuffix(SUFFIX)))
        return EndsEpoch(path, (database.st_uid, database.st_gid))
    except (OSError, ValueError) as exc:
        log.warning("sessions are read on every request: no shared end counter (%s)", exc)
        return None
