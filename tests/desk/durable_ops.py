"""Durable desks for the operator's tests: runs stopped half way, statuses, waiting."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path

from helpers import ticket_id_by_order
from sqlalchemy import select

from tether_desk.db import Database
from tether_desk.durable import DurableDesk, DurableSettings
from tether_desk.models import Ticket
from tether_desk.pipeline import Desk


def durable(
    desk: Desk,
    *,
    version: str = "1",
    block_at: str | None = None,
    reached: threading.Event | None = None,
    executor_id: str = "local",
) -> DurableDesk:
    """The desk's durable runs in this process (as ``executor_id``); ``block_at``: a
    boundary where every ticket stops for good (until the process stops DBOS), setting
    ``reached`` there."""

    async def boundary(name: str, _ticket: int) -> None:
        if name == block_at:
            if reached is not None:
                reached.set()
            await asyncio.Event().wait()

    settings = DurableSettings(
        executor_id=executor_id, poll_seconds=0.05, application_version=version
    )
    return DurableDesk(desk, settings, boundary=boundary if block_at else None)


def status(db: Database, ticket_id: int) -> str:
    with db.read_connection() as c:
        return str(c.scalar(select(Ticket.status).where(Ticket.id == ticket_id)))


async def until(check: object, seconds: float = 60) -> None:
    for _ in range(int(seconds / 0.05)):
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError("not in time")


def log_path(desk: Desk) -> Path:
    return Path(desk.db.url.split("///", 1)[1]).with_suffix(".runs.db")


async def stuck_in_triage(desk: Desk, version: str = "1") -> int:
    """A refund ticket whose workflow (of ``version``) stopped (DBOS shut down) half way
    through its step (the claim, the triage and its record, the agent's turns to its
    proposal done, the approval not stored): the ticket still ``triaging``."""
    ticket = ticket_id_by_order(desk.db, "C-2210")
    await stop_at(desk, ticket, "approval.requested", "triaging", version=version)
    return ticket


async def stopped_after_its_step(desk: Desk, version: str = "1") -> int:
    """A refund ticket whose workflow (of ``version``) stopped (DBOS shut down) after its
    step (the claim, the triage, the agent's turns to its proposal, the approval stored)
    was logged, before the workflow returned: the ticket awaits its approval."""
    ticket = ticket_id_by_order(desk.db, "C-2210")
    await stop_at(desk, ticket, "ticket.done", "awaiting_approval", version=version)
    return ticket


async def stop_at(
    desk: Desk,
    ticket: int,
    boundary: str,
    expected: str,
    *,
    version: str = "1",
    executor_id: str = "local",
) -> None:
    """Run ``ticket`` (under ``version``, as ``executor_id``) until its workflow reaches
    ``boundary``, check that the ticket's status is ``expected`` there, then stop DBOS
    (the workflow stays pending), whatever happened."""
    reached = threading.Event()
    runs = durable(
        desk, version=version, block_at=boundary, reached=reached, executor_id=executor_id
    )
    await runs.start()
    try:
        await runs.submit(ticket)
        await until(reached.is_set)
        assert status(desk.db, ticket) == expected
    finally:
        await runs.stop()


async def wait_under(desk: Desk, version: str, tickets: list[int]) -> None:
    """Run ``tickets`` under application ``version`` until each waits for its approval,
    then stop (their waits stay pending under that version)."""
    runs = durable(desk, version=version)
    await runs.start()
    try:
        for t in tickets:
            await runs.submit(t)
        for t in tickets:
            await until(lambda t=t: status(desk.db, t) == "awaiting_approval")  # type: ignore[misc]
    finally:
        await runs.stop()


TETHER = [sys.executable, "-c", "from tether.cli import main; main()"]


def worker_start_up(worker_id: str, db: str) -> tuple[int, str]:
    """``tether worker`` started on ``db`` and stopped (SIGTERM) once it takes tickets: its
    exit code and what it printed."""
    worker = subprocess.Popen(
        [*TETHER, "worker", "--id", worker_id, "--db", db, "--model", "scripted"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert worker.stdout is not None
    lines = []
    for line in worker.stdout:
        lines.append(line)
        if "taking tickets" in line:
            break
    worker.terminate()
    out = "".join(lines) + worker.communicate(timeout=60)[0]
    return worker.returncode, out
