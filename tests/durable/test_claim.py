"""A plain queue's claim by statements compiled once takes the runs DBOS's own method
takes, in its order and up to its limits, and leaves the rows it leaves, on SQLite and
PostgreSQL; a queue with a shared budget keeps DBOS's method; a DBOS whose claim changed
is refused by name."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import sqlalchemy as sa
from dbos import DBOS, DBOSClient, _dbos
from dbos._sys_db import SystemDatabase
from dbos._utils import GlobalParams

from tether.durable import DurableConfig, claim, launch, shutdown_async
from tether.errors import ConfigError

_IGNORED = ("workflow_uuid", "queue_name", "creator_xid", "created_at", "updated_at")
"""Columns that differ between two runs enqueued and claimed alike (times compared apart)."""


@DBOS.workflow(name="claim.echo")
async def echo(n: int) -> int:
    return n


def _queue(name: str, worker_concurrency: int | None, **limits: Any) -> Any:
    """What a claim reads of a queue (a Queue object would be polled by DBOS's thread)."""
    fields = ("_concurrency", "_partition_concurrency", "_limiter", "_partition_limiter")
    return SimpleNamespace(
        name=name,
        _worker_concurrency=worker_concurrency,
        _partition_worker_concurrency=None,
        **{f: limits.get(f) for f in fields},
    )


def _rows(sys_db: Any, queue_name: str) -> list[dict[str, Any]]:
    ws = sys_db.tables.workflow_status
    query = sa.select(ws).where(ws.c.queue_name == queue_name).order_by(ws.c.workflow_uuid)
    with sys_db.engine.begin() as c:
        rows = [dict(r._mapping) for r in c.execute(query)]
    for row in rows:
        deadline = row.pop("workflow_deadline_epoch_ms")
        row["deadline_after_start"] = deadline is not None and deadline >= row["created_at"]
        row["started"] = row["started_at_epoch_ms"] is not None
        row.pop("started_at_epoch_ms")
        for key in _IGNORED:
            row.pop(key)
    return rows


def _enqueue(client: DBOSClient, queue_name: str) -> list[str]:
    """Runs of every kind a claim sorts: priorities, a timeout, another version."""
    kinds: list[dict[str, Any]] = [
        {"priority": 5},
        {},
        {"workflow_timeout": 30.0},
        {"app_version": "another"},
        {"priority": 1},
        {},
    ]
    ids = []
    for i, extra in enumerate(kinds):
        wid = f"{queue_name}-{i}"
        options = {"queue_name": queue_name, "workflow_name": "claim.echo", "workflow_id": wid}
        client.enqueue({**options, **extra}, i)  # type: ignore[arg-type]
        ids.append(wid)
    return ids


async def test_claims_take_what_dbos_takes(log_url: str) -> None:
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    client = DBOSClient(system_database_url=log_url)
    try:
        sys_db = _dbos._dbos_global_instance._sys_db  # type: ignore[union-attr]
        ours = sys_db._tether_claim
        assert ours.__qualname__.startswith("_claiming.")
        theirs = SystemDatabase.start_queued_workflows.__get__(sys_db)
        version = GlobalParams.app_version
        for q in ("claim.theirs", "claim.ours"):
            _enqueue(client, q)
        calls: list[tuple[int | None, int, str | None]] = [
            (3, 1, "me"),  # two places left
            (3, 3, None),  # full: nothing claimed
            (None, 0, "me"),  # the rest of this version
            (None, 0, None),  # nothing left
        ]
        for places, running, owner in calls:
            got: list[tuple[list[str], str | None]] = []
            for method, q in ((theirs, "claim.theirs"), (ours, "claim.ours")):
                ids, stopped = method(
                    _queue(q, places), "exec", version, None, running, owner_xid=owner
                )
                got.append(([i.split("-")[1] for i in ids], stopped))
            assert got[0] == got[1]
            assert _rows(sys_db, "claim.ours") == _rows(sys_db, "claim.theirs")
        assert got[0] == ([], None)
        assert [r["status"] for r in _rows(sys_db, "claim.ours")].count("ENQUEUED") == 1
    finally:
        client.destroy()
        await shutdown_async()


async def test_a_queue_run_is_claimed_through_the_replacement(log_url: str) -> None:
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    try:
        sys_db = _dbos._dbos_global_instance._sys_db  # type: ignore[union-attr]
        taken: list[list[str]] = []
        real = sys_db._tether_claim

        def counting(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs)
            taken.append(out[0])
            return out

        sys_db._tether_claim = counting
        work = await DBOS.register_queue_async("claim.work", polling_interval_sec=0.05)
        handles = [await work.enqueue_async(echo, n) for n in range(3)]
        assert [await h.get_result() for h in handles] == [0, 1, 2]
        assert sorted(i for ids in taken for i in ids) == sorted(
            h.get_workflow_id() for h in handles
        )
    finally:
        await shutdown_async()


async def test_a_queue_with_a_shared_budget_keeps_dbos_claim(
    log_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    try:
        sys_db = _dbos._dbos_global_instance._sys_db  # type: ignore[union-attr]
        seen: list[str] = []

        def stock(self: Any, queue: Any, *args: Any, **kwargs: Any) -> Any:
            seen.append(queue.name)
            return [], "concurrency"

        monkeypatch.setattr(SystemDatabase, "start_queued_workflows", stock)
        ours = claim._claiming(sys_db)
        shared = _queue("claim.shared", None, _concurrency=2)
        assert ours(shared, "exec", "v", None) == ([], "concurrency")
        assert ours(_queue("claim.parts", 2), "exec", "v", "key") == ([], "concurrency")
        assert seen == ["claim.shared", "claim.parts"]
    finally:
        await shutdown_async()


def test_a_dbos_whose_claim_changed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    claim._verify()  # the pinned DBOS: its claim is the one reproduced
    monkeypatch.setattr(claim, "_EXPECTED_DIGEST", "0" * 16)
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        claim._verify()


def test_another_database_keeps_dbos_claim() -> None:
    class Other:
        sharded = False

    assert claim.install(Other()) is False
