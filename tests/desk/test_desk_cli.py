"""``tether serve`` and ``tether desk demo`` from the command line."""

from __future__ import annotations

import hashlib
import re
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
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
    assert "resume at the next start" in first.output  # durable by default
    assert "camille@desk.example" in first.output and "127.0.0.1" in first.output
    with serve(db) as second, urllib.request.urlopen(f"{second.url}/login", timeout=10) as r:
        assert r.status == 200
    assert second.process.returncode == 0, second.output
    assert "reused" in second.output


WORKER = [sys.executable, "-c", "from tether.cli import main; main()", "worker"]


def wait_until(check: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def statuses(db: str) -> dict[int, str]:
    with sqlite3.connect(db) as c:
        return dict(c.execute("SELECT id, status FROM tickets").fetchall())


def triage_runs(db: str) -> list[tuple[int, str]]:
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT ticket_id, id FROM runs WHERE kind = 'triage'").fetchall()
    return sorted(rows)


def ticket_workflows(db: str) -> dict[str, tuple[str, str]]:
    """The durable log's ticket workflows: id -> (status, executor id)."""
    with sqlite3.connect(Path(db).with_suffix(".runs.db")) as c:
        rows = c.execute(
            "SELECT workflow_uuid, status, executor_id FROM workflow_status "
            "WHERE name = 'tether_desk.ticket'"
        ).fetchall()
    return {w: (status, executor) for w, status, executor in rows}


def durable_run_id(ticket_id: int) -> str:
    """The triage run id the durable flow derives from the ticket's workflow id (the plain
    pipeline's are random)."""
    return hashlib.sha256(f"desk-ticket-{ticket_id}:triage".encode()).hexdigest()[:24]


def test_serve_with_plain_worker_processes_processes_tickets_in_each(tmp_path: Path) -> None:
    db = str(tmp_path / "desk.db")
    with serve(db, args=("--workers", "2", "--plain")) as served:
        for _ in range(6):  # the two processes answer (connections spread over them)
            with urllib.request.urlopen(f"{served.url}/login", timeout=10) as r:
                assert r.status == 200 and "Log in" in r.read().decode()
        wait_until(lambda: "new" not in statuses(db).values(), "the workers processed nothing")
    assert served.process.returncode == 0, served.output
    assert "workers:  2 processes" in served.output and "stopped." in served.output
    assert "runs:     plain" in served.output
    assert "awaiting_approval" in statuses(db).values()
    triaged = triage_runs(db)
    assert [t for t, _ in triaged] == sorted(statuses(db))  # each ticket triaged once
    assert all(run != durable_run_id(t) for t, run in triaged)
    assert not Path(db).with_suffix(".runs.db").exists()


def test_serve_with_worker_processes_runs_durable_tickets_in_one_executor(
    tmp_path: Path,
) -> None:
    """Durable with --workers: two processes serve the console and only hand tickets to
    the queue; the serve process's own executor (--id) runs every one of them."""
    db = str(tmp_path / "desk.db")
    with serve(db, args=("--workers", "2", "--id", "exec-1")) as served:
        for _ in range(6):
            with urllib.request.urlopen(f"{served.url}/login", timeout=10) as r:
                assert r.status == 200 and "Log in" in r.read().decode()
        wait_until(lambda: "new" not in statuses(db).values(), "the executor processed nothing")
        wait_until(
            lambda: {s for s, _ in ticket_workflows(db).values()} == {"SUCCESS"},
            "the ticket workflows did not end",
        )
    assert served.process.returncode == 0, served.output
    assert "workers:  2 processes" in served.output and "stopped." in served.output
    assert "durable" in served.output and "run by worker 'exec-1'" in served.output
    assert "Traceback" not in served.output and "cancelled" not in served.output
    assert "awaiting_approval" in statuses(db).values()
    triaged = triage_runs(db)
    assert [t for t, _ in triaged] == sorted(statuses(db))  # each ticket triaged once
    assert all(run == durable_run_id(t) for t, run in triaged)  # by the durable flow
    assert ticket_workflows(db) == {f"desk-ticket-{t}": ("SUCCESS", "exec-1") for t in statuses(db)}


def test_serve_with_worker_processes_and_no_process_leaves_tickets_to_tether_worker(
    tmp_path: Path,
) -> None:
    """--workers 2 --no-process: the consoles queue the tickets and run none; a
    ``tether worker`` on the same database takes them."""
    db = str(tmp_path / "desk.db")
    with serve(db, args=("--workers", "2", "--no-process")) as served:
        wait_until(lambda: len(ticket_workflows(db)) == 4, "the consoles queued nothing")
        assert {s for s, _ in ticket_workflows(db).values()} == {"ENQUEUED"}
        assert set(statuses(db).values()) == {"new"}  # no process of the serve runs them
        worker = subprocess.Popen(
            [*WORKER, "--db", db, "--id", "w-1", "--model", "scripted", "--poll", "0.1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_until(lambda: "new" not in statuses(db).values(), "the worker took nothing")
        finally:
            worker.send_signal(signal.SIGINT)
            out = worker.communicate(timeout=30)[0]
    assert served.process.returncode == 0, served.output
    assert "run by `tether worker` processes" in served.output
    assert worker.returncode == 0, out
    assert {e for _, e in ticket_workflows(db).values()} == {"w-1"}


def test_serve_explains_a_bad_model_spec(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    result = CliRunner().invoke(
        desk_app, ["serve", "--db", str(tmp_path / "d.db"), "--model", "nope:x"]
    )
    assert result.exit_code == 2
    assert "unknown model provider 'nope'" in result.output
    # the command's SIGTERM handler (stop as Ctrl-C does) is gone once it returns
    assert signal.getsignal(signal.SIGTERM) is before


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


def test_a_ticket_cut_short_by_a_killed_serve_resumes_at_the_next_start(tmp_path: Path) -> None:
    """The main job's durability: ``tether serve`` on SQLite, killed (SIGKILL) while the
    refund agent works, started again: the ticket goes on from its last logged step."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from desk_server import free_port
    from helpers import ticket_id_by_order
    from sqlalchemy import select

    from tether_desk.db import Database, sqlite_url
    from tether_desk.models import Run, RunEvent, Ticket
    from tether_desk.seed import seed

    db_path = tmp_path / "desk.db"

    def start() -> subprocess.Popen[str]:
        argv = [sys.executable, "-c", "from tether.cli import main; main()", "serve"]
        argv += ["--db", str(db_path), "--model", "scripted:0.7", "--port", str(free_port())]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        return subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True
        )

    def status(db: Database, ticket: int) -> str:
        with db.read_connection() as c:
            return str(c.scalar(select(Ticket.status).where(Ticket.id == ticket)))

    def wait(check: object, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while not check():  # type: ignore[operator]
            assert time.monotonic() < deadline, "not in time"
            time.sleep(0.05)

    db = Database(sqlite_url(db_path))
    db.migrate()
    seed(db)
    ticket = ticket_id_by_order(db, "C-2210")  # a refund of 12 EUR
    first = start()  # takes the new tickets at once
    wait(lambda: status(db, ticket) == "triaging")

    def agent_at_work() -> bool:  # its run exists, not yet its approval
        with db.read_connection() as c:
            found = c.scalar(select(Run.id).where(Run.kind == "refund", Run.ticket_id == ticket))
        return found is not None

    wait(agent_at_work)
    first.kill()
    first.communicate()
    assert status(db, ticket) == "triaging"
    second = start()
    try:
        wait(lambda: status(db, ticket) == "awaiting_approval")
    finally:
        second.send_signal(signal.SIGINT)
        out = second.communicate(timeout=30)[0]
    assert second.returncode == 0 and "durable" in out, out
    with db.read_connection() as c:
        runs = c.execute(select(Run.id, Run.kind).where(Run.ticket_id == ticket)).all()
        kinds = c.scalars(
            select(RunEvent.kind).where(RunEvent.run_id.in_([r for r, _ in runs]))
        ).all()
    assert sorted(k for _, k in runs) == ["refund", "triage"]  # each run once
    assert kinds.count("triage") == 1 and kinds.count("approval_requested") == 1
    db.dispose()
