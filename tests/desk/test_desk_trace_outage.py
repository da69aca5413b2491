"""A run's trace written by its timer during a database outage: one warning line, not a
traceback per timer; any other failure keeps its traceback."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import Connection, func, select
from sqlalchemy.exc import OperationalError

from tether_desk.db import Database
from tether_desk.models import Run, RunEvent
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


def test_a_failed_write_is_sent_again_whole(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's row and its events stay pending when their transaction fails at commit
    (a full disk): the next write sends them all, never events without their run."""
    recorder = RunRecorder(db, "run-3", 1, "refund").start()
    recorder.note("triage", {"kind": "refund"})
    real = db.write_connection

    @contextmanager
    def full_at_commit() -> Iterator[Connection]:
        with real() as c:
            yield c
            raise OperationalError("COMMIT", {}, Exception("database or disk is full"))

    monkeypatch.setattr(db, "write_connection", full_at_commit)
    with pytest.raises(OperationalError):
        recorder.flush()
    monkeypatch.setattr(db, "write_connection", real)
    recorder.note("proposal", {"amount": 1})
    recorder.flush()
    with db.read_connection() as c:
        assert c.scalar(select(func.count()).select_from(Run).where(Run.id == "run-3")) == 1
        rows = c.execute(
            select(RunEvent.seq, RunEvent.kind).where(RunEvent.run_id == "run-3")
        ).all()
    assert sorted(rows) == [(1, "triage"), (2, "proposal")]
