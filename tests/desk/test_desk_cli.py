"""``tether serve`` and ``tether desk demo`` from the command line."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

from desk_server import serve
from typer.testing import CliRunner

from tether_desk.cli import desk_app


def test_serve_creates_seeds_then_reuses_the_database_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    db = str(tmp_path / "desk.db")
    with serve(db) as first, urllib.request.urlopen(f"{first.url}/login", timeout=10) as r:
        assert r.status == 200 and "Log in" in r.read().decode()
    assert first.process.returncode == 0, first.output
    assert "created and seeded" in first.output and "stopped." in first.output
    assert "camille@desk.example" in first.output and "127.0.0.1" in first.output
    with serve(db) as second, urllib.request.urlopen(f"{second.url}/login", timeout=10) as r:
        assert r.status == 200
    assert second.process.returncode == 0, second.output
    assert "reused" in second.output


def test_serve_with_worker_processes_serves_processes_tickets_and_stops(tmp_path: Path) -> None:
    import sqlite3
    import time

    db = str(tmp_path / "desk.db")
    with serve(db, args=("--workers", "2")) as served:
        for _ in range(6):  # the two processes answer (connections spread over them)
            with urllib.request.urlopen(f"{served.url}/login", timeout=10) as r:
                assert r.status == 200 and "Log in" in r.read().decode()
        deadline = time.monotonic() + 60
        with sqlite3.connect(db) as c:
            while c.execute("SELECT count(*) FROM tickets WHERE status = 'new'").fetchone()[0]:
                assert time.monotonic() < deadline, "the workers did not process the tickets"
                time.sleep(0.2)
            statuses = dict(c.execute("SELECT id, status FROM tickets").fetchall())
            triaged = c.execute("SELECT ticket_id FROM runs WHERE kind = 'triage'").fetchall()
    assert served.process.returncode == 0, served.output
    assert "workers:  2 processes" in served.output and "stopped." in served.output
    assert "awaiting_approval" in statuses.values()
    assert sorted(t for (t,) in triaged) == sorted(statuses)  # each ticket triaged once


def test_serve_explains_a_bad_model_spec(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        desk_app, ["serve", "--db", str(tmp_path / "d.db"), "--model", "nope:x"]
    )
    assert result.exit_code == 2
    assert "unknown model provider 'nope'" in result.output


def test_the_terminal_demo_walks_through_the_seeded_tickets(tmp_path: Path) -> None:
    # injected ticket: approve, type the wrong then the right amount, send;
    # tracking: answered by code; refund of 12 EUR: deny; other: a person takes it
    answers = "y\n89.00\ny\n89.90\ny\nn\nphoto please\ny\n"
    result = CliRunner().invoke(
        desk_app, ["demo", "--db", str(tmp_path / "demo.db"), "--model", "scripted"], input=answers
    )
    out = result.output
    assert result.exit_code == 0, out
    assert "NOTE INTERNE" in out
    assert "Validation deja obtenue" in out and "claims an approval was already given" in out
    assert "names another order or record" in out and "C-2210" in out
    assert "Paid for the order" in out and "Already refunded" in out
    assert "does not match" in out  # the wrong amount was refused
    assert "approved; ticket is now draft_ready" in out
    assert "votre commande C-1187 est en preparation" in out
    assert "denied; ticket is now draft_ready" in out
    assert "a person takes this ticket" in out


def test_the_runtime_finds_the_desk_commands_through_entry_points() -> None:
    from tether import cli

    cli.add_plugin_commands()
    cli.add_plugin_commands()  # twice: nothing is added twice
    listed = CliRunner().invoke(cli.app, ["--help"]).output
    commands = re.findall(r"^│ ([a-z-]+) ", listed, re.MULTILINE)
    assert {"serve", "desk", "demo", "redteam"} <= set(commands)
    assert commands.count("serve") == 1
    result = CliRunner().invoke(cli.app, ["desk", "--help"])
    assert result.exit_code == 0 and "demo" in result.output
