"""The one check behind every change tether makes to DBOS's private code.

Each module that reproduces or reroutes a DBOS internal (:mod:`~tether.durable.steplog`,
:mod:`~tether.durable.outcome`, :mod:`~tether.durable.prepared`,
:mod:`~tether.durable.hops`, :mod:`~tether.durable.queueconfig`, :mod:`~tether.durable.claim`,
:mod:`~tether.durable.statuses`, :mod:`~tether.durable.notifier`) keeps a digest of the
DBOS source it was written against and calls :func:`require_known` before it installs
anything: a DBOS release that changed that source is refused, naming the installed
version, never patched silently.
"""

from __future__ import annotations

import hashlib
import inspect

from tether.errors import ConfigError


def source_digest(*objects: object) -> str:
    """A short digest of the source code of ``objects`` (classes, functions, methods)."""
    h = hashlib.sha256()
    for obj in objects:
        h.update(inspect.getsource(obj).encode())  # type: ignore[arg-type]
    return h.hexdigest()[:16]


def require_known(digest: str, expected: str, what: str) -> None:
    """Raise :class:`ConfigError` unless ``digest`` is the ``expected`` one; ``what``
    names the DBOS code that changed (``"its step log methods"``)."""
    if digest != expected:
        raise unknown_dbos(f"{what} changed")


def unknown_dbos(why: str) -> ConfigError:
    """The error for a DBOS whose private code or schema is not what tether reads or
    reproduces (``why``: what differs), naming the installed version."""
    from importlib.metadata import version

    return ConfigError(
        f"tether.durable does not know this DBOS ({version('dbos')}): {why}; "
        "install the dbos version pinned in uv.lock"
    )
