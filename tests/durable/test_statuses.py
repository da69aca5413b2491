"""The statuses of claimed runs, read by a statement built once, are the ones DBOS's own
method answers, in the order asked, on SQLite and PostgreSQL; a DBOS whose status read
changed is refused by name."""

from __future__ import annotations

from typing import Any

import pytest
from dbos import DBOS, DBOSClient, _dbos
from dbos._sys_db import SystemDatabase

from tether.durable import DurableConfig, launch, shutdown_async, statuses
from tether.errors import ConfigError


@DBOS.workflow(name="statuses.echo")
async def echo(n: int) -> int:
    return n


async def test_statuses_are_what_dbos_reads(log_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    launch(DurableConfig(log_url, polling_interval_seconds=0.05))
    client = DBOSClient(system_database_url=log_url)
    try:
        sys_db = _dbos._dbos_global_instance._sys_db  # type: ignore[union-attr]
        ours = sys_db.get_workflow_statuses
        assert ours.__qualname__.startswith("_reading.")
        theirs = SystemDatabase.get_workflow_statuses.__get__(sys_db)
        kinds: list[dict[str, Any]] = [
            {},
            {"priority": 4, "deduplication_id": "d", "authenticated_roles": ["a", "b"]},
            {"workflow_timeout": 30.0, "app_version": "another", "authenticated_user": "u"},
        ]
        ids = []
        for i, extra in enumerate(kinds):
            options = {"queue_name": "statuses.idle", "workflow_name": "statuses.echo"}
            options |= {"workflow_id": f"s{i}", **extra}
            client.enqueue(options, i, k="v")  # type: ignore[arg-type]
            ids.append(f"s{i}")
        handle = await DBOS.start_workflow_async(echo, 7)  # a finished run too
        assert await handle.get_result() == 7
        ids.append(handle.get_workflow_id())
        asks = [ids, ids[::-1], ["nobody", ids[1], ids[1], "s0"], [], ids[:1]]
        for ask in asks:
            got = ours(ask)
            assert got == theirs(ask)
            assert [s["workflow_uuid"] for s in got] == [i for i in ask if i != "nobody"]
        assert ours(ids)[1]["authenticated_roles"] == theirs(ids)[1]["authenticated_roles"]
        monkeypatch.setattr(statuses, "MAX_PREPARED_IDS", 2)  # a longer list: DBOS's way
        assert ours(ids) == theirs(ids)
    finally:
        client.destroy()
        await shutdown_async()


def test_a_dbos_whose_status_read_changed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    statuses._verify()  # the pinned DBOS: its read is the one reproduced
    monkeypatch.setattr(statuses, "_EXPECTED_DIGEST", "0" * 16)
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        statuses._verify()


def test_another_database_keeps_dbos_status_read() -> None:
    class Other:
        sharded = False

    assert statuses.install(Other()) is False
