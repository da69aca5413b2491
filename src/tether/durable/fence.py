"""The one check behind every change tether makes to DBOS's private code.

Each module that reproduces or reroutes a DBOS internal (:mod:`~tether.durable.steplog`,
:mod:`~tether.durable.outcome`, :mod:`~tether.durable.prepared`,
:mod:`~tether.durable.hops`, :mod:`~tether.durable.queueconfig`, :mod:`~tether.durable.claim`,
:mod:`~tether.durable.statuses`, :mod:`~tether.durable.notifier`, :mod:`~tether.durable.starts`,
:mod:`~tether.durable.results`, :mod:`~tether.durable.listener`,
:mod:`~tether.durable.queue_stop`, :mod:`~tether.durable.dispatch`,
:mod:`~tether.durable.handoff`) keeps a digest of the
DBOS source it was written against and calls :func:`require_known` before it installs
anything: a DBOS release that changed that source is refused, naming the installed
version, never patched silently.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable
from typing import Any

from tether.errors import ConfigError


def source_digest(*objects: object) -> str:
    """A short digest of the source code of ``objects`` (classes, functions, methods)."""
    h = hashlib.sha256()
    for obj in objects:
        h.update(_source(obj).encode())
    return h.hexdigest()[:16]


def _source(obj: object) -> str:
    """The source of a function or method; of a class, its name and bases, the source of
    each of its functions and the names of its other attributes, in definition order.

    Never a class's source through :func:`inspect.getsource`, which finds it with the
    :mod:`ast` module: Python 3.11's is not safe across threads, and a traceback
    formatted in another thread meanwhile (DBOS logging a run's failure while it
    launches) made it fail with "AST constructor recursion depth mismatch". A
    function's source is found from its code's first line, without :mod:`ast`."""
    if not isinstance(obj, type):
        return inspect.getsource(obj)  # type: ignore[arg-type]
    parts = [f"class {obj.__qualname__}({', '.join(b.__qualname__ for b in obj.__bases__)})"]
    for name, member in vars(obj).items():
        if isinstance(member, staticmethod | classmethod):
            member = member.__func__
        elif isinstance(member, property):
            member = member.fget
        if inspect.isfunction(member):
            parts.append(inspect.getsource(member))
        elif not (name.startswith("__") and name.endswith("__")):
            parts.append(name)
    return "\n".join(parts)


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


def one_statement(sys_db: Any) -> Callable[[], Any]:
    """How to open a connection for one statement on DBOS's system database ``sys_db``: on
    PostgreSQL in autocommit (one statement is its own transaction: no ``BEGIN`` and
    ``COMMIT`` round trips around it, the driver sending each apart), on SQLite a
    transaction begun as DBOS begins them (its write lock taken first)."""
    if sys_db._is_sqlite:
        return sys_db.engine.begin  # type: ignore[no-any-return]
    autocommit = sys_db.engine.execution_options(isolation_level="AUTOCOMMIT")
    return autocommit.connect  # type: ignore[no-any-return]
