"""Fixtures of the durable runtime's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def log_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A durable log's URL: a SQLite file, then the test PostgreSQL server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.sqlite'}"
    else:
        yield request.getfixturevalue("pg_url")
