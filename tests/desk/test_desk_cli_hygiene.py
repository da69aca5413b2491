"""The desk's commands fail in one line with exit status 2 on every bad input, never print
a password, create no folder the user did not name, stop cleanly on SIGTERM and SIGINT,
and a console-only ``serve --no-process`` needs no model."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from desk_server import free_port
from typer.testing import CliRunner

from tether.cli import app as tether_app
from tether_desk.cli import desk_app

TETHER = [sys.executable, "-c", "from tether.cli import main; main()"]
runner = CliRunner()


def refused(args: list[str], app: object = desk_app) -> str:
    """The output of a command that must fail cleanly: exit 2, no traceback."""
    result = runner.invoke(app, args)  # type: ignore[arg-type]
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return str(result.output)


@pytest.mark.parametrize(
    ("command", "db", "says"),
    [
        *[(c, "nonsense://x", "unsupported database 'nonsense'") for c in ("serve", "demo")],
        *[(c, "mysql://u:pw@h/db", "unsupported database 'mysql'") for c in ("serve", "demo")],
        ("serve", "", "--db is empty"),  # the demo's empty --db: a fresh temporary file
    ],
)
def test_a_bad_database_url_is_one_line(command: str, db: str, says: str) -> None:
    out = refused([command, "--db", db, "--model", "scripted"])
    assert says in out and "pw" not in out


def test_a_path_under_a_file_or_a_missing_folder_is_refused_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    (tmp_path / "afile").write_text("x")
    out = refused(["serve", "--db", str(tmp_path / "afile" / "desk.db"), "--model", "scripted"])
    assert "is a file, not a folder" in out
    missing = tmp_path / "no" / "such" / "folder"
    out = refused(["serve", "--db", str(missing / "desk.db"), "--model", "scripted"])
    assert "does not exist" in out
    assert not (tmp_path / "no").exists()  # no parent folder created


def test_a_postgres_password_is_never_printed(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    url = f"postgresql://desk:s3cretPASS@127.0.0.1:{port}/desk"
    out = refused(["serve", "--db", url, "--model", "scripted", "--plain"])
    assert "cannot open the database" in out and "***" in out
    assert "s3cretPASS" not in out


@pytest.mark.parametrize("port", ["99999", "0", "-1"])
def test_a_port_out_of_range_is_refused(tmp_path: Path, port: str) -> None:
    out = refused(["serve", "--db", str(tmp_path / "d.db"), "--port", port])
    assert "--port" in out
    assert not (tmp_path / "d.db").exists()


@pytest.mark.parametrize("worker_id", ["", " ", "a b", "x" * 57])
def test_an_empty_or_odd_worker_id_is_refused(tmp_path: Path, worker_id: str) -> None:
    from tether.cli import add_plugin_commands

    add_plugin_commands()
    out = refused(["worker", "--id", worker_id, "--db", str(tmp_path / "d.db")], tether_app)
    assert "is not a worker id" in out
    out = refused(["serve", "--id", worker_id, "--db", str(tmp_path / "d.db")])
    assert "is not a worker id" in out
    assert not (tmp_path / "d.db").exists()


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A folder on a tmpfs remounted read-only (root writes through a 0444 file's mode)
    holding a seeded desk."""
    folder = tmp_path / "ro"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)], check=True)
    try:
        from tether_desk.db import Database
        from tether_desk.seed import seed

        db = Database(str(folder / "desk.db"))
        db.migrate()
        seed(db)
        db.dispose()
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder / "desk.db"
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def test_a_read_only_database_is_one_line_before_any_banner(read_only: Path) -> None:
    proc = subprocess.run(
        [*TETHER, "serve", "--db", str(read_only), "--model", "scripted", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "read-only" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "database:" not in proc.stdout  # no banner announced it


def _cassette(tmp_path: Path, name: str, content: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(content)
    return str(path)


def _document(**changes: object) -> bytes:
    doc: dict[str, object] = {
        "format": "tether-cassette",
        "version": 1,
        "meta": {"kind": "agent"},
        "interactions": [],
        "outcome": None,
    }
    doc.update(changes)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("binary.json", bytes(range(256)) * 4, "not a text file"),
        ("deep.json", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        ("meta.json", _document(meta="agent"), "malformed 'meta'"),
        ("outcome.json", _document(outcome="completed"), "malformed 'outcome'"),
    ],
)
def test_replay_of_a_bad_cassette_is_one_line(
    tmp_path: Path, name: str, content: bytes, says: str
) -> None:
    out = refused(["replay", _cassette(tmp_path, name, content)], tether_app)
    assert says in out


def _start(args: list[str], port: int) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [*TETHER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[0]
        with socket.socket() as s:
            if port and s.connect_ex(("127.0.0.1", port)) == 0:
                return process
        if not port and process.stdout is not None:
            return process
        time.sleep(0.1)
    process.kill()
    raise AssertionError("not listening in time")


@pytest.mark.parametrize(
    ("sig", "more"),
    [(signal.SIGTERM, ()), (signal.SIGINT, ()), (signal.SIGTERM, ("--workers", "2"))],
)
def test_serve_stops_cleanly_on_sigterm_and_sigint(
    tmp_path: Path, sig: signal.Signals, more: tuple[str, ...]
) -> None:
    port = free_port()
    db = str(tmp_path / "desk.db")
    args = ["serve", "--db", db, "--model", "scripted", "--port", str(port), *more]
    process = _start(args, port)
    process.send_signal(sig)
    out = process.communicate(timeout=60)[0]
    assert process.returncode == 0, out
    assert "stopped." in out and "Traceback" not in out


def test_worker_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    db = str(tmp_path / "desk.db")
    args = ["worker", "--id", "w-1", "--db", db, "--model", "scripted", "--poll", "0.1"]
    process = subprocess.Popen(
        [*TETHER, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    for line in process.stdout:  # until it takes tickets
        if "taking tickets" in line:
            break
    process.send_signal(signal.SIGTERM)
    out = process.communicate(timeout=60)[0]
    assert process.returncode == 0, out
    assert "stopped." in out and "Traceback" not in out


def test_a_console_only_serve_needs_no_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider without its key would refuse; the console runs no model, so it starts."""
    port = free_port()
    env_model = "anthropic:claude-without-a-key"
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    db = str(tmp_path / "desk.db")
    args = ["serve", "--db", db, "--model", env_model, "--no-process", "--port", str(port)]
    process = _start(args, port)
    process.send_signal(signal.SIGINT)
    out = process.communicate(timeout=60)[0]
    assert process.returncode == 0, out
    assert "`tether worker` processes" in out and "stopped." in out
