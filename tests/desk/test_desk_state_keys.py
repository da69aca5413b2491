"""The desk seals its run states with a key it makes at first start, beside the database."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
from helpers import pending_approval, refunds_by_order, staff_id, ticket_id_by_order

from forked import FORK, run_forked
from tether.errors import StateError
from tether.state_seal import KEYS_ENV
from tether_desk.agent import refund_agent
from tether_desk.db import Database, sqlite_url
from tether_desk.decisions import claim_decision, resume
from tether_desk.pipeline import Desk, load_scope, process_ticket
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed
from tether_desk.state_keys import key_file


def _keys_of(path: str, out: Any) -> None:
    out.put(Database(sqlite_url(path)).state_keys().dumps())


async def test_the_key_is_made_at_first_start_beside_the_database_and_seals_its_states(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEYS_ENV)
    db_path = tmp_path / "desk.db"
    db = Database(sqlite_url(db_path))
    db.migrate()
    seed(db)
    path = key_file(db.url)
    assert path == tmp_path / "desk.db.state-keys" and path.exists()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = path.read_text().strip().split(":", 1)[1]
    desk = Desk(db, DeskScriptedModel())
    tid = ticket_id_by_order(db, "C-2210")
    assert await process_ticket(desk, tid) == "awaiting_approval"
    approval = pending_approval(db, tid)
    assert approval is not None
    db.dispose()
    assert secret.encode() not in db_path.read_bytes()  # never in the database it protects
    # a state rewritten in the database (the amount, consistently) is refused: nothing runs
    with db.write_connection() as c:
        row = c.exec_driver_sql(
            "SELECT state FROM tether_run_heads WHERE run_id = ?", (approval.run_id,)
        ).one()
        record = json.loads(row.state)
        record["memo"] = {"forged": True}
        c.exec_driver_sql(
            "UPDATE tether_run_heads SET state = ? WHERE run_id = ?",
            (json.dumps(record), approval.run_id),
        )
    state = await db.state_store().load(approval.run_id)
    assert state is not None
    agent = refund_agent(desk.client, db, load_scope(db, tid))
    with pytest.raises(StateError, match="seal does not match"):
        await agent.resume(state, [p.approve() for p in state.pending])
    claimed = claim_decision(desk, approval.id, staff_id(db), approve=True)
    assert await resume(desk, claimed) == "failed"  # visible to staff, nothing refunded
    assert refunds_by_order(db) == {}


def test_processes_starting_at_once_share_one_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(KEYS_ENV)
    out = FORK.Queue()
    path = str(tmp_path / "fresh.db")
    assert run_forked(_keys_of, [(path, out)] * 4) == [0] * 4
    keys = {out.get(timeout=10) for _ in range(4)}
    assert len(keys) == 1
    assert Database(sqlite_url(path)).state_keys().dumps() in keys


def test_the_environment_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEYS_ENV, "ops1:" + "s" * 40)
    db = Database(sqlite_url(tmp_path / "desk.db"))
    assert db.state_keys().key_ids == ("ops1",)
    assert not (tmp_path / "desk.db.state-keys").exists()
