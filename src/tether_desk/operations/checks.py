"""What a desk command is given, checked before anything starts: the database's URL and
folder, the executor id. Each problem is one sentence saying what to do
(:class:`~tether.errors.ConfigError`); a password in a URL is never printed."""

from __future__ import annotations

import os
import re
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from tether.errors import ConfigError

SCHEMES = ("sqlite", "postgresql", "postgres")
EXECUTOR_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,55}$")


def shown(url: str) -> str:
    """``url`` as it may be printed: its password hidden (a bare path as is)."""
    if "://" not in url:
        return url
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return url.split("://", 1)[0] + "://..."


def check_database(url: str) -> None:
    """Refuse a database the desk cannot use: an unknown scheme, a SQLite file whose
    folder does not exist (no folder is created), that is not a file, or that this
    process cannot write."""
    if not url.strip():
        raise ConfigError("--db is empty; give a SQLite file path or a postgresql:// URL")
    if "://" in url:
        try:
            parsed = make_url(url)
        except (ArgumentError, ValueError) as exc:
            raise ConfigError(f"--db {shown(url)!r} is not a database URL") from exc
        backend = parsed.get_backend_name()
        if backend not in SCHEMES:
            raise ConfigError(
                f"--db {shown(url)!r}: unsupported database {backend!r}; use a SQLite file "
                "path, sqlite:///FILE or postgresql://USER@HOST/DB"
            )
        if backend != "sqlite":
            return
        if not parsed.database or parsed.database == ":memory:":
            raise ConfigError("--db needs a SQLite file (not :memory:) or a postgresql:// URL")
        path = Path(parsed.database)
    else:
        path = Path(url)
    check_sqlite_file(path)


def check_sqlite_file(path: Path) -> None:
    """The checks of :func:`check_database` on a SQLite file's path."""
    folder = path.parent
    for above in (folder, *folder.parents):
        if above.exists() and not above.is_dir():
            raise ConfigError(f"--db {str(path)!r}: {str(above)!r} is a file, not a folder")
    if not folder.is_dir():
        raise ConfigError(f"--db {str(path)!r}: the folder {str(folder)!r} does not exist")
    if path.exists() and not path.is_file():
        raise ConfigError(f"--db {str(path)!r} is not a file")
    if not _writable(path):
        raise ConfigError(
            f"--db {str(path)!r} is read-only here; the desk writes to its database and "
            "to files beside it: give a writable file"
        )


def _writable(path: Path) -> bool:
    """Whether ``path`` (or, if missing, its folder) can really be written: a probe file
    beside it (``os.access`` says yes to root on a read-only mount)."""
    probe = path.parent / f".{path.name}.probe-{os.getpid()}"
    try:
        probe.touch()
        probe.unlink()
        if path.exists():
            with path.open("r+b"):
                pass
    except OSError:
        return False
    return True


def check_executor_id(value: str) -> str:
    """An executor id: letters, digits and ``._:@-``, at most 56 characters."""
    if not EXECUTOR_ID.match(value):
        raise ConfigError(
            f"--id {value!r} is not a worker id: use 1 to 56 letters, digits or . _ : @ -, "
            "starting with a letter or a digit"
        )
    return value
