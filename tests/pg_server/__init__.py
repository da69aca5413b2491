"""A PostgreSQL server for the tests: Debian's package, started by pytest-postgresql on
127.0.0.1 through ``pg_ctl`` beside this file, and stopped at the end of the session."""

from __future__ import annotations

from pathlib import Path

from pytest_postgresql import factories

PG_CTL = Path(__file__).with_name("pg_ctl")

postgresql_server = factories.postgresql_proc(executable=str(PG_CTL), host="127.0.0.1", port=None)
"""The server (session scope): ``.host``, ``.port``, ``.user``, ``.password``."""


def url(server: object, dbname: str, driver: str = "postgresql") -> str:
    """A SQLAlchemy URL for database ``dbname`` on ``server``."""
    host, port, user = server.host, server.port, server.user  # type: ignore[attr-defined]
    password = server.password or ""  # type: ignore[attr-defined]
    auth = f"{user}:{password}" if password else user
    return f"{driver}://{auth}@{host}:{port}/{dbname}"
