"""The desk's clock: naive UTC datetimes (what SQLite and PostgreSQL both store as is)."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, in UTC, without a time zone (the columns are ``TIMESTAMP WITHOUT TIME ZONE``)."""
    return datetime.now(UTC).replace(tzinfo=None)
