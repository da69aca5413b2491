"""A run's trace written by its timer during a database outage: one warning line, not a
traceback per timer; any other failure keeps its traceback."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

from tether_desk.db import Database
from tether_desk.trace import RunRecorder


def _failing(db: Database, exc: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
    @contextmanager
    def write_connection() -> Iterator[Connection]:
        raise exc
        yield  # pragma: no cover

    monkeypatch.setattr(db, "write_connection", write_connection)


def test_an_outage_is_one_warning_line(
    db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = RunRecorder(db, "run-1", 1, "refund")
    recorder.note("triage", {"kind": "refund"})
    _failing(db, OperationalError("INSERT", {}, Exception("database is locked")), monkeypatch)
    with caplog.at_level(logging.WARNING, logger="tether_desk"):
        recorder._flush_due()
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.exc_info is None
    assert "run-1 deferred (OperationalError)" in record.getMessage()


def test_another_failure_keeps_its_traceback(
    db: Database, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = RunRecorder(db, "run-2", 1, "refund")
    recorder.note("triage", {"kind": "refund"})
    _failing(db, ValueError("a bug"), monkeypatch)
    with caplog.at_level(logging.WARNING, logger="tether_desk"):
        recorder._flush_due()
    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
