"""Upgrades: the runs another application version left in the durable log.

A process of version N runs only version N's runs (DBOS checks each run's version before
it recovers or dequeues it). When a change to a ticket's steps raised the version, the
runs still in progress under the old one wait for a process of that version. At start a
process says so in one line (:func:`start_notices`, which also names the runs that
wait on an executor that is gone) and names the two ways out (the
runbook in docs/durable.md): drain them with the old code, or mark them for retry under
the new version (``tether runs retry --stranded``: each re-runs from its first step, under
the same workflow id, so with the same run ids and idempotency keys).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from tether_desk.db import Database
from tether_desk.operations.liveness import executors
from tether_desk.operations.runs import ACTIVE, NAMES


def other_versions(client: Any, version: str) -> Counter[str]:
    """How many runs in progress each version other than ``version`` has."""
    found = client.list_workflows(
        name=NAMES,
        status=ACTIVE,
        load_input=False,
        load_output=False,
    )
    return Counter(w.app_version for w in found if w.app_version != version)


def notice(counts: Counter[str], version: str, db: str) -> str | None:
    """The one-line notice for ``counts`` (``None`` when there is nothing to say)."""
    if not counts:
        return None
    runs = ", ".join(f"{n} of version {v}" for v, n in sorted(counts.items()))
    return (
        f"upgrade: runs in progress under another version wait ({runs}; this is version "
        f"{version}): drain them with the old code, or retry them under this version with "
        f"`tether runs retry --stranded --db {db}` (see docs/durable.md, Upgrades)"
    )


def orphaned(client: Any, desk_db: Database, version: str, me: str) -> Counter[str]:
    """How many runs of ``version`` wait on each other executor that has no fresh
    heartbeat (stopped or dead: they resume at its next start, or once recovered)."""
    found = client.list_workflows(
        name=NAMES,
        status="PENDING",
        app_version=version,
        load_input=False,
        load_output=False,
    )
    alive = {e for e, x in executors(desk_db).items() if x.alive()}
    return Counter(
        w.executor_id for w in found if w.executor_id not in alive and w.executor_id != me
    )


def start_notices(system_url: str, desk_db: Database, version: str, me: str, db: str) -> list[str]:
    """What a starting process says about the log at ``system_url``: runs of another
    version (:func:`notice`), runs waiting on executors that are gone. Nothing if the log
    does not exist yet or cannot be read (the process then says what goes wrong itself)."""
    from dbos import DBOSClient

    url = make_url(system_url)
    if url.get_backend_name() == "sqlite" and not Path(url.database or "").exists():
        return []
    try:
        client = DBOSClient(system_database_url=system_url, application_name="tether-desk")
    except Exception:
        return []
    said: list[str] = []
    try:
        line = notice(other_versions(client, version), version, db)
        if line:
            said.append(line)
        for executor, n in sorted(orphaned(client, desk_db, version, me).items()):
            said.append(
                f"recovery: {n} run(s) wait on executor {executor!r}, which is not running: "
                f"restart it with --id {executor}, or `tether runs recover {executor} --db {db}`"
            )
    except Exception:
        return said
    finally:
        client.destroy()
    return said
