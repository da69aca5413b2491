"""The statements a test's own thread sends through an engine (DBOS's threads, which use
the same engine meanwhile, are not counted)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa


@contextmanager
def statements(engine: sa.Engine) -> Iterator[list[tuple[str, str]]]:
    """Each statement this thread sends through ``engine`` in the block, with its
    connection's isolation level (``AUTOCOMMIT`` or ``""``)."""
    seen: list[tuple[str, str]] = []
    here = threading.get_ident()

    def note(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if threading.get_ident() == here:
            seen.append((statement, conn.get_execution_options().get("isolation_level", "")))

    sa.event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        sa.event.remove(engine, "before_cursor_execute", note)
