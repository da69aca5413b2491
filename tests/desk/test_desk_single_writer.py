"""One process runs a SQLite desk's tickets: a second ``serve`` or a ``worker`` beside it
refuses in one line; a console-only ``serve --no-process`` starts beside it; the lock
goes with its holder, even one killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from desk_server import free_port, serve

TETHER = [sys.executable, "-c", "from tether.cli import main; main()"]


def refuses(args: list[str]) -> str:
    proc = subprocess.run([*TETHER, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr


def test_a_second_process_on_one_sqlite_file_refuses(tmp_path: Path) -> None:
    db = str(tmp_path / "desk.db")
    with serve(db) as first:
        said = refuses(["serve", "--db", db, "--model", "scripted", "--port", str(free_port())])
        assert f"pid {first.process.pid}" in said and "--no-process" in said
        said = refuses(["worker", "--id", "w-2", "--db", db, "--model", "scripted"])
        assert "already runs the tickets of desk.db" in said
        with serve(db, args=("--no-process",)) as console:  # a console only: allowed
            assert console.process.poll() is None


def test_the_lock_goes_with_a_killed_holder(tmp_path: Path) -> None:
    db = str(tmp_path / "desk.db")
    port = free_port()
    first = subprocess.Popen(
        [*TETHER, "serve", "--db", db, "--model", "scripted", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lock = Path(db + ".lock")
    deadline = time.monotonic() + 90
    while not (lock.exists() and lock.read_text() == str(first.pid)):
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    with serve(db) as second:
        assert second.process.poll() is None
    assert "stopped." in second.output
