"""A durable SQLite desk on a small tmpfs whose disk fills while a ticket runs: the step
that meets the full disk retries, the run waits, and once space is freed it goes on in
the same process, without a restart."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from durable_ops import status, until
from helpers import ticket_id_by_order

from tether_desk.db import Database, sqlite_url
from tether_desk.durable import DurableDesk, DurableSettings
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "disk"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def fill(folder: Path) -> Path:
    """Fill the disk to its last byte; returns the filler file."""
    filler = folder / "filler"
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True, check=False
    )
    with pytest.raises(OSError, match="No space left"):  # nothing fits any more
        (folder / "probe").write_bytes(b"x" * 65536)
    (folder / "probe").unlink(missing_ok=True)
    return filler


async def test_a_full_disk_heals_without_a_restart(
    small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tether_desk")
    db = Database(sqlite_url(small_disk / "desk.db"))
    db.migrate()
    seed(db)
    desk = Desk(db, DeskScriptedModel())
    ticket = ticket_id_by_order(db, "C-2210")
    gate = threading.Event()  # the workflows run on DBOS's loop, in its own thread

    async def boundary(name: str, _ticket: int) -> None:
        if name == "model.before:1":  # the triage step is logged, the ticket triaging
            await asyncio.to_thread(gate.wait)

    runs = DurableDesk(desk, DurableSettings(poll_seconds=0.05), boundary=boundary)
    await runs.start()
    try:
        await runs.submit(ticket)
        await until(lambda: status(db, ticket) == "triaging")
        filler = await asyncio.to_thread(fill, small_disk)
        gate.set()  # the refund agent's first step meets the full disk
        await asyncio.sleep(8)
        assert status(db, ticket) == "triaging"  # it could not go on
        assert "transient database error" in caplog.text
        filler.unlink()  # the fault clears
        await until(lambda: status(db, ticket) == "awaiting_approval", 60)
    finally:
        await runs.stop()
        db.dispose()
