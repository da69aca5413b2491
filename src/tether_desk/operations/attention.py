"""What the console shows of the durable runs: the tickets whose run needs attention
(so a ticket never reads "being read" forever), and decisions refused when no process
could deliver them.

Both read the durable log through the console's DBOS client (``desk.runs.client``); the
list of runs is kept a couple of seconds, so a busy inbox asks the log rarely. A page
(:func:`attention_for_page`) never reads the log on the event loop and never waits for it
while a recent list exists: one refresh at a time runs in a thread and the pages meanwhile
show the list it replaces. A plain desk (no durable runs) has nothing to show and refuses
nothing.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tether.durable.status import WorkflowLog
from tether_desk.errors import Conflict
from tether_desk.operations.liveness import executors
from tether_desk.operations.runs import RunRow, attention_by_ticket, get_run, list_runs
from tether_desk.pipeline import Desk

CACHE_SECONDS = 2.0
STALE_SECONDS = 10.0
"""A page shows a list this old at most while its refresh runs (older: it waits for it)."""
_cache: dict[int, tuple[float, list[RunRow]]] = {}
_refreshing: dict[int, asyncio.Future[list[RunRow]]] = {}
_needing: dict[int, tuple[list[RunRow], dict[int, RunRow]]] = {}
"""Per desk: the kept list and its tickets needing attention (pages read it, never change it)."""


def durable_client(desk: Desk) -> Any | None:
    """The console's DBOS client, if the desk is durable and connected."""
    runs = desk.runs
    client = getattr(runs, "_client", None)
    return client


def current_version(desk: Desk) -> str:
    settings = getattr(desk.runs, "settings", None)
    return str(getattr(settings, "application_version", "1"))


def desk_runs(desk: Desk, *, fresh: bool = False) -> list[RunRow]:
    """The desk's runs not yet done (kept :data:`CACHE_SECONDS`)."""
    client = durable_client(desk)
    if client is None:
        return []
    now = time.monotonic()
    cached = _cache.get(id(desk))
    if not fresh and cached is not None and now - cached[0] < CACHE_SECONDS:
        return cached[1]
    rows = list_runs(client, desk.db, current_version(desk))
    _cache[id(desk)] = (now, rows)
    return rows


def forget_cache(desk: Desk) -> None:
    """After an action on runs: the next look reads the log again."""
    _cache.pop(id(desk), None)
    _refreshing.pop(id(desk), None)


def tickets_needing_attention(desk: Desk) -> dict[int, RunRow]:
    """Ticket id -> the run of it that cannot go on by itself."""
    try:
        return attention_by_ticket(desk_runs(desk))
    except Exception:  # the log unreachable: the page still renders, without it
        return {}


async def attention_for_page(desk: Desk) -> dict[int, RunRow]:
    """:func:`tickets_needing_attention` for a page on the event loop: from the list kept
    if it is recent; past :data:`CACHE_SECONDS` one refresh starts in a thread (the pages
    asking meanwhile share it) and, up to :data:`STALE_SECONDS`, the page does not wait
    for it. After an action on runs (:func:`forget_cache`) the next page waits."""
    if durable_client(desk) is None:
        return {}
    now = time.monotonic()
    cached = _cache.get(id(desk))
    if cached is not None and now - cached[0] < CACHE_SECONDS:
        return _needing_attention(desk, cached[1])
    loop = asyncio.get_running_loop()
    running = _refreshing.get(id(desk))
    if running is None or running.done() or running.get_loop() is not loop:
        running = loop.run_in_executor(None, _refresh, desk)
        running.add_done_callback(lambda f: f.cancelled() or f.exception())  # seen, if unused
        _refreshing[id(desk)] = running
    if cached is not None and now - cached[0] < STALE_SECONDS:
        return _needing_attention(desk, cached[1])
    try:
        return attention_by_ticket(await asyncio.shield(running))
    except Exception:  # the log unreachable: the page still renders, without it
        return {}


def _needing_attention(desk: Desk, rows: list[RunRow]) -> dict[int, RunRow]:
    """:func:`attention_by_ticket` of the kept list, worked out once per list."""
    kept = _needing.get(id(desk))
    if kept is None or kept[0] is not rows:
        kept = _needing[id(desk)] = (rows, attention_by_ticket(rows))
    return kept[1]


def _refresh(desk: Desk) -> list[RunRow]:
    try:
        return desk_runs(desk, fresh=True)
    except Exception:
        _cache.pop(id(desk), None)
        raise


def durable_log(desk: Desk) -> WorkflowLog | None:
    """The cheap reads of the durable log's workflow status, if the desk is durable and
    connected."""
    log = getattr(desk.runs, "_log", None)
    return log if isinstance(log, WorkflowLog) else None


def refuse_undeliverable(
    desk: Desk, run_id: str, call_id: str, context: object = None
) -> bool | None:
    """Raise :class:`~tether_desk.errors.Conflict` if the run waiting for the decision on
    ``call_id`` of ``run_id`` cannot receive it: failed, stopped, or logged by a version
    no live process runs.

    Only a run of the previous layout waits in a workflow of its own (``desk-wait:``);
    a decision on any other starts the workflow that applies it, under this version.
    Returns whether the run waits in such a workflow, for the delivery to use (``None``:
    not known, a plain desk or the log unreachable).

    ``context``, the approval's: one that holds its trace's place
    (:data:`~tether_desk.durable.flow.TRACE_SEQ`) was stored by this layout's step, which
    logs no wait: nothing is read. Otherwise one primary-key read of the log (the caller
    read the approval); the full view of the run only when its wait is not plainly going
    on."""
    client, log = durable_client(desk), durable_log(desk)
    if client is None or log is None:
        return None
    from tether_desk.durable import wait_id
    from tether_desk.durable.flow import TRACE_SEQ

    if isinstance(context, dict) and TRACE_SEQ in context:
        return False  # the previous layout's wait stored no trace's place

    # the previous layout logged the wait before the approval row (its first step wrote
    # it): a wait absent now is never logged later
    wid, version = wait_id(run_id, call_id), current_version(desk)
    try:
        status = log.get(wid)
    except Exception:  # the log unreachable: the decision is stored, delivered later
        return None
    if status is None:
        return False  # the usual case: the decision starts its own workflow
    if status.status in ("PENDING", "ENQUEUED") and status.app_version == version:
        return True  # it waits, under this version; nothing more to read
    try:
        row = get_run(client, desk.db, wid, version)
    except Exception:
        return True  # gone between the two reads: sending to it is harmless
    if row.state in ("error", "cancelled"):
        raise Conflict(
            "This run stopped (" + row.words + "); a decision cannot reach it. An operator "
            "can retry it from the Runs page, then decide again."
        )
    if row.state == "stranded":
        old = [e for e in executors(desk.db).values() if e.version == row.version and e.alive()]
        if not old:
            raise Conflict(
                f"This run was started by version {row.version} of the desk, which no "
                "process runs now; the decision could not be applied. An operator can "
                "retry it under this version from the Runs page, then decide again."
            )
    return True
