"""``tether runs`` from a terminal, and what a starting worker says about runs that wait
on a worker that is gone: one line each, with the command that unblocks them."""

from __future__ import annotations

import asyncio
from pathlib import Path

from durable_ops import stopped_after_its_step, worker_start_up
from typer.testing import CliRunner

from tether_desk.db import Database, sqlite_url
from tether_desk.durable import workflow_id
from tether_desk.operations.runs_cli import runs_app
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed


def test_runs_of_a_gone_worker_are_named_at_start_and_by_tether_runs(tmp_path: Path) -> None:
    path = tmp_path / "desk.db"
    db = Database(sqlite_url(path))
    db.migrate()
    seed(db)
    ticket = asyncio.run(stopped_after_its_step(Desk(db, DeskScriptedModel())))  # "local" gone
    wid = workflow_id(ticket)

    listed = CliRunner().invoke(runs_app, ["list", "--db", str(path)])
    assert listed.exit_code == 0, listed.output
    assert f"! {wid}  pending on a stopped or dead worker" in listed.output
    assert "recover it onto a live one" in listed.output
    assert "1 run(s), 1 needing attention." in listed.output
    shown = CliRunner().invoke(runs_app, ["show", wid, "--db", str(path)])
    assert shown.exit_code == 0, shown.output
    assert "desk.triage" in shown.output and f"ticket {ticket}" in shown.output

    code, out = worker_start_up("w-2", str(path))
    assert code == 0, out
    assert "recovery: 1 run(s) wait on executor 'local', which is not running" in out
    assert f"tether runs recover local --db {path}" in out
    db.dispose()


def test_tether_runs_errors_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "desk.db"
    db = Database(sqlite_url(path))
    db.migrate()
    db.dispose()
    runner = CliRunner()
    for args, says in [
        (["show", "desk-ticket-999", "--db", str(path)], "there is no run 'desk-ticket-999'"),
        (["retry", "desk-ticket-999", "--db", str(path)], "there is no run"),
        (["list", "--db", "nonsense://x"], "unsupported database 'nonsense'"),
        (["operator", "nobody@x.example", "--db", str(path)], "no staff account"),
    ]:
        result = runner.invoke(runs_app, args)
        assert result.exit_code == 2, result.output
        assert says in result.output and "Traceback" not in result.output
