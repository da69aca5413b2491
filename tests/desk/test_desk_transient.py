"""Which database errors are transient, and the step retry that absorbs them."""

from __future__ import annotations

import errno

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError

from tether_desk.operations.transient import is_transient, retry_transient


def op_error(text: str) -> OperationalError:
    return OperationalError("INSERT", {}, Exception(text))


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (op_error("database or disk is full"), True),
        (op_error("database is locked"), True),
        (op_error("disk I/O error"), True),
        (op_error("server closed the connection unexpectedly"), True),
        (op_error("terminating connection due to administrator command"), True),
        (OSError(errno.ENOSPC, "No space left on device"), True),
        (IntegrityError("INSERT", {}, Exception("UNIQUE constraint failed")), False),
        (op_error("no such table: tickets"), False),
        (ValueError("bad amount"), False),
    ],
)
def test_transient_errors_are_told_apart(exc: Exception, transient: bool) -> None:
    assert is_transient(exc) is transient
    wrapped = RuntimeError("step failed")
    wrapped.__cause__ = exc
    assert is_transient(wrapped) is transient


async def test_a_transient_error_is_retried_and_others_are_not() -> None:
    calls: list[int] = []

    async def twice_full() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise op_error("database or disk is full")
        return "written"

    assert await retry_transient(twice_full, first_delay=0.001) == "written"
    assert len(calls) == 3

    calls.clear()

    async def broken() -> str:
        calls.append(1)
        raise op_error("no such table: tickets")

    with pytest.raises(OperationalError, match="no such table"):
        await retry_transient(broken, first_delay=0.001)
    assert len(calls) == 1

    calls.clear()

    async def always_full() -> str:
        calls.append(1)
        raise op_error("database or disk is full")

    with pytest.raises(OperationalError, match="disk is full"):
        await retry_transient(always_full, tries=4, first_delay=0.001)
    assert len(calls) == 4
