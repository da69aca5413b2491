"""Fixtures of the durable-mode tests: a fresh PostgreSQL database per test."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from pytest_postgresql.janitor import DatabaseJanitor

from pg_server import postgresql_server, url

__all__ = ["pg_url", "postgresql_server"]

_numbers = itertools.count()


@pytest.fixture
def pg_url(postgresql_server: object) -> Iterator[str]:
    """The URL of an empty database on the test server, dropped after the test."""
    s = postgresql_server
    name = f"durable_{next(_numbers)}"
    janitor = DatabaseJanitor(
        user=s.user,
        host=s.host,
        port=s.port,
        dbname=name,
        password=s.password,  # type: ignore[attr-defined]
    )
    with janitor:
        yield url(s, name)
