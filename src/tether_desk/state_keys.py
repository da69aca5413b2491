"""The key that seals the desk's run states, made at first start and kept beside the database.

``TETHER_STATE_KEYS`` wins when it is set (several processes, a secret store, a rotation).
Otherwise a SQLite database ``desk.db`` gets ``desk.db.state-keys`` next to it, readable by
its owner alone; any other database a file under ``$XDG_CONFIG_HOME/tether/`` (default
``~/.config``) named after the database; an in-memory database a key of this process alone.
The key is never in the database it protects: whoever can rewrite a stored state cannot
reseal it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from pathlib import Path

from sqlalchemy.engine import make_url

from tether.state_seal import StateKeys

__all__ = ["desk_state_keys", "key_file"]


def key_file(url: str) -> Path | None:
    """Where the key of the database at ``url`` lives (``None``: in memory, no file)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            return None
        db = Path(parsed.database)
        return db.with_name(f"{db.name}.state-keys")
    home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    where = parsed.render_as_string(hide_password=True)
    return home / "tether" / f"state-keys-{hashlib.sha256(where.encode()).hexdigest()[:16]}"


def desk_state_keys(url: str) -> StateKeys:
    """The keys for the database at ``url``: ``$TETHER_STATE_KEYS``, else the key file
    (created with a fresh key on first use), else a key of this process alone."""
    env = StateKeys.from_env()
    if env is not None:
        return env
    path = key_file(url)
    if path is None:
        return StateKeys.ephemeral()
    if not path.exists():
        _create(path)
    return StateKeys.parse(path.read_text().strip())


def _create(path: Path) -> None:
    """Write a fresh key to ``path`` unless another process got there first (the file
    appears whole or not at all: written aside, then linked in place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(StateKeys.generate("desk1").dumps() + "\n")
        with contextlib.suppress(FileExistsError):  # another process made it first
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
