"""A plain queue's claim is one statement (in autocommit on PostgreSQL, where DBOS's is
five round trips: ``BEGIN``, the latest version, the SELECT, the UPDATE, ``COMMIT``),
the status read after it is answered by it, claimers at once never take the same run,
and a named application's claim takes what DBOS's takes."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOSClient, _dbos
from dbos._sys_db import SystemDatabase
from dbos._utils import GlobalParams
from statements import statements
from test_claim import _enqueue, _queue, _rows

from tether.durable import DurableConfig, launch, shutdown_async, statuses


def _sys_db() -> Any:
    return _dbos._dbos_global_instance._sys_db  # type: ignore[union-attr]


async def test_a_claim_is_one_statement(log_url: str) -> None:
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    client = DBOSClient(system_database_url=log_url)
    try:
        sys_db = _sys_db()
        _enqueue(client, "claim.count")
        with statements(sys_db.engine) as seen:
            ids, stopped = sys_db._tether_claim(
                _queue("claim.count", 3), "exec", GlobalParams.app_version, None, 0
            )
        assert (len(ids), stopped) == (3, None)
        assert len(seen) == 1, seen
        statement, isolation = seen[0]
        if log_url.startswith("postgresql"):
            assert isolation == "AUTOCOMMIT"
            assert "FOR UPDATE SKIP LOCKED" in statement and statement.lstrip().startswith("WITH")
        else:
            assert statement.lstrip().startswith("UPDATE") and "LIMIT" in statement
    finally:
        client.destroy()
        await shutdown_async()


async def test_claimers_at_once_never_take_the_same_run(log_url: str) -> None:
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    client = DBOSClient(system_database_url=log_url)
    try:
        sys_db = _sys_db()
        version = GlobalParams.app_version
        for n in range(8):
            for i in range(5):
                options = {
                    "queue_name": "claim.race",
                    "workflow_name": "claim.echo",
                    "workflow_id": f"race-{n}-{i}",
                }
                client.enqueue(options, i)  # type: ignore[arg-type]
        taken: dict[str, list[str]] = {}
        start = threading.Barrier(6)

        def claimer(name: str) -> None:
            start.wait()
            got = taken.setdefault(name, [])
            while True:
                ids, _ = sys_db._tether_claim(
                    _queue("claim.race", 2), name, version, None, 0, owner_xid=name
                )
                if not ids:
                    return
                got.extend(ids)

        threads = [threading.Thread(target=claimer, args=(f"c{n}",)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        every = [i for ids in taken.values() for i in ids]
        assert len(every) == len(set(every)) == 40
        ws = sys_db.tables.workflow_status
        with sys_db.engine.begin() as c:
            owners = dict(
                c.execute(
                    sa.select(ws.c.workflow_uuid, ws.c.owner_xid).where(
                        ws.c.queue_name == "claim.race"
                    )
                ).all()
            )
        assert all(owners[i] == name for name, ids in taken.items() for i in ids)
    finally:
        client.destroy()
        await shutdown_async()


@pytest.mark.parametrize("latest", [None, True, False])
async def test_a_named_application_claims_what_dbos_claims(
    log_url: str, latest: bool | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    client = DBOSClient(system_database_url=log_url)
    try:
        sys_db = _sys_db()
        monkeypatch.setattr(sys_db, "app_name", "desk")
        theirs = SystemDatabase.start_queued_workflows.__get__(sys_db)
        version = GlobalParams.app_version
        for q in ("named.theirs", "named.ours"):
            _enqueue(client, q)
        for places in (2, None, None):
            got = [
                method(_queue(q, places), "exec", version, None, 0, is_latest_version=latest)
                for method, q in ((theirs, "named.theirs"), (sys_db._tether_claim, "named.ours"))
            ]
            assert [i.split("-")[1] for i in got[0][0]] == [i.split("-")[1] for i in got[1][0]]
            assert _rows(sys_db, "named.ours") == _rows(sys_db, "named.theirs")
    finally:
        client.destroy()
        await shutdown_async()


async def test_the_read_after_a_claim_is_answered_by_the_claim(log_url: str) -> None:
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    client = DBOSClient(system_database_url=log_url)
    try:
        sys_db = _sys_db()
        _enqueue(client, "claim.read")
        stock = SystemDatabase.get_workflow_statuses.__get__(sys_db)
        ids, _ = sys_db._tether_claim(
            _queue("claim.read", 3), "exec", GlobalParams.app_version, None, 0, owner_xid="me"
        )
        assert len(ids) == 3
        with statements(sys_db.engine) as seen:
            recalled = sys_db.get_workflow_statuses(ids)
            assert seen == []  # answered by the claim's RETURNING
            again = sys_db.get_workflow_statuses(ids)
            assert len(seen) == 1  # once only: the next read reads
        read = {s["workflow_uuid"]: s for s in stock(ids)}
        assert recalled == again == [read[i] for i in ids]
        assert [s["status"] for s in recalled] == ["PENDING"] * 3
        assert {type(s["is_debounced"]) for s in recalled} == {bool}
        ids, _ = sys_db._tether_claim(
            _queue("claim.read", 1), "exec", GlobalParams.app_version, None, 0, owner_xid="me"
        )
        asked = [ids[0], recalled[0]["workflow_uuid"]]  # not the runs the claim took
        with statements(sys_db.engine) as seen:
            other = sys_db.get_workflow_statuses(asked)
        assert len(seen) == 1, seen  # not the claim's: read
        read = {s["workflow_uuid"]: s for s in stock(asked)}
        assert other == [read[i] for i in asked]
    finally:
        client.destroy()
        await shutdown_async()


async def test_a_read_long_after_a_claim_reads(
    log_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    client = DBOSClient(system_database_url=log_url)
    try:
        sys_db = _sys_db()
        _enqueue(client, "claim.late")
        ids, _ = sys_db._tether_claim(
            _queue("claim.late", 1), "exec", GlobalParams.app_version, None, 0, owner_xid="me"
        )
        ws = sys_db.tables.workflow_status
        with sys_db.engine.begin() as c:  # changed since, as a cancel elsewhere would
            c.execute(sa.update(ws).where(ws.c.workflow_uuid == ids[0]).values(status="CANCELLED"))
        monkeypatch.setattr(statuses, "RECALL_SECONDS", 0.0)
        assert [s["status"] for s in sys_db.get_workflow_statuses(ids)] == ["CANCELLED"]
    finally:
        client.destroy()
        await shutdown_async()
