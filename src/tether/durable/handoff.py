"""Runs enqueued by this process started at once while it has a place for them.

A run enqueued to a queue waits for the queue's thread to look: the doorbell
(:mod:`~tether.durable.dispatch`) wakes that thread at once, but the look still goes
through a thread hand-over while the enqueuer goes on. :func:`start_next` makes the
look in the caller's thread instead, right after its enqueue: while this process's
worker has a free place on the queue it claims the queue's next runs (oldest first,
DBOS's own claim, counting the places every other claim of this process took, under the
doorbell's lock) and starts them on the workflows' event loop, as the queue's thread
would. A run that finds no place stays queued for the thread's next look, as do runs
enqueued with no application version (the claim here takes this version's only, which
spares reading which version is the latest).

Crash safety is the queue's: the run is in the log as enqueued before it is claimed, and
claimed (owned by this executor) before it starts; a process killed in between leaves
it queued, or pending for this executor's recovery.

:func:`enqueue_now` goes one write further where it can: while this worker has a place
free on the queue and its last look left nothing waiting there (:attr:`Doorbell.backlog
<tether.durable.dispatch.Doorbell.backlog>`), the run is written already claimed by this
executor (what the claim would have written: PENDING, this executor and version, owned by
a new token, one attempt counted), in the enqueue's one transaction, and started at once;
no claim follows. It holds the place like a claim, under the same lock. A process killed
after that write leaves the run pending for this executor, as after a claim: its
recovery puts it back on the queue. Anything else (every place taken, runs possibly
waiting, a queue with partitions or a shared budget, a run with a timeout, a
deduplication id or a delay, a run of another version, an id already in the log) takes
the two-step way above. A run enqueued by another process since this worker's last look
can be passed by one started this way; it runs at the next look, or once a place frees.

The DBOS code the start reproduces (the queue thread's dispatch of what it claimed, the
enqueue's insert) is checked against the pinned release's source; a release that changed
it is refused with :class:`ConfigError`, naming the installed DBOS
(``tests/durable/test_handoff.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from functools import cache, partial
from typing import Any, TypeVar

from tether.durable import dispatch
from tether.durable.claim import is_plain
from tether.durable.fence import require_known, source_digest
from tether.durable.loops import runs_here

log = logging.getLogger("tether.durable")
T = TypeVar("T")
_HOOKED = "_tether_handoff"

_EXPECTED_DIGEST = "80c29eadfae2cc72"
"""Digest of DBOS 3.4.0's queue thread (its dispatch of the runs it claimed),
``execute_dequeued_workflow`` and the event loop's ``submit_coroutine``."""


_INSERT_DIGEST = "3d65e83b9de2fdda"
"""Digest of DBOS 3.4.0's enqueue (``DBOSClient._enqueue``, ``_build_enqueue_status`` and
``build_enqueue_status``) and its insert (``SystemDatabase.init_workflow``,
``_insert_workflow_status``), which :func:`enqueue_claimed` makes with a claimed status."""


def _source_digest() -> str:
    from dbos import _core, _event_loop

    return source_digest(
        dispatch.dbos_queue_worker(),
        _core.execute_dequeued_workflow,
        _event_loop.BackgroundEventLoop.submit_coroutine,
    )


def _insert_digest() -> str:
    from dbos import _client, _enqueue_options
    from dbos._sys_db import SystemDatabase

    return source_digest(
        _client.DBOSClient._enqueue,
        _client.DBOSClient._build_enqueue_status,
        _enqueue_options.build_enqueue_status,
        SystemDatabase.init_workflow,
        SystemDatabase._insert_workflow_status,
    )


def enqueue_now(client: Any, options: Mapping[str, Any], *args: Any) -> None:
    """Enqueue a run with ``client`` (a :class:`dbos.DBOSClient` on this process's log),
    ``options`` naming its queue, and start it here at once while a place is free:
    written already claimed where it can be (:func:`enqueue_claimed`), else enqueued and
    then claimed (:func:`enqueue_and_start`)."""
    if not enqueue_claimed(client, options, *args):
        enqueue_and_start(options["queue_name"], partial(client.enqueue, options, *args))


def enqueue_claimed(client: Any, options: Mapping[str, Any], *args: Any) -> bool:
    """Write the run ``client.enqueue(options, *args)`` would enqueue as already claimed
    by this worker, and start it: only while a place of this worker on its queue is free
    and nothing may wait there (see the module); whether it did. ``False``: nothing was
    written."""
    queue_name = options.get("queue_name")
    bell = dispatch.bell_of(queue_name) if isinstance(queue_name, str) else None
    if bell is None or bell.is_set():
        return False
    dbos, queue = bell._dbos, bell.queue
    if not is_plain(queue) or queue._has_partition_limits() or dbos._sys_db.sharded:
        return False
    if client._sys_db.engine.url != dbos._sys_db.engine.url:  # another log than this worker's
        return False
    if bell.backlog or bell.full():  # the caller enqueues: its inputs are not built twice
        return False
    from dbos._utils import GlobalParams, generate_uuid

    workflow_id, status = client._build_enqueue_status(options, *args)
    if not _claimable(status, GlobalParams.app_version):
        return False
    _verify()
    with bell.claiming:  # as a claim: one at a time, counting the places the others took
        if bell.backlog or bell.full():  # again: another claim may have taken the place
            return False
        owner = generate_uuid()
        status["status"] = "PENDING"  # what DBOS's claim writes, and its insert for PENDING
        status["executor_id"] = GlobalParams.executor_id
        status["app_version"] = GlobalParams.app_version
        with dispatch.quiet():
            written, started_here = dbos._sys_db.init_workflow(status, creator_xid=owner)
        if not started_here or written != "PENDING":  # already in the log: not ours
            return False
        bell.claimed[workflow_id] = time.monotonic()  # its place, until DBOS registers it
    status["recovery_attempts"] = 1  # as the insert of a PENDING run counts it
    _start(dbos, [status], owner)
    return True


def _claimable(status: Mapping[str, Any], version: str) -> bool:
    """Whether a run so built can be written claimed: nothing a claim would compute or
    wait for (a deadline, a deduplication id, a delay, a partition), this version's."""
    return (
        status.get("workflow_timeout_ms") is None
        and status.get("workflow_deadline_epoch_ms") is None
        and status.get("deduplication_id") is None
        and status.get("delay_until_epoch_ms") is None
        and status.get("queue_partition_key") is None
        and status.get("shard_key") is None
        and status.get("app_version") in (None, version)
    )


def enqueue_and_start(queue_name: str, enqueue: Callable[[], T]) -> T:
    """``enqueue()`` (which enqueues to ``queue_name`` from this thread), then
    :func:`start_next`; the queue's thread is woken only when that started nothing."""
    with dispatch.quiet():
        out = enqueue()
    if not start_next(queue_name):  # full, taken, of no version: the thread looks
        dispatch.ring(queue_name)
    return out


def start_next(queue_name: str) -> int | None:
    """Claim and start ``queue_name``'s next runs now, in this thread, while this
    process's worker has places free on it; how many started. ``None`` (no look) where
    this process runs no thread for that queue or the queue has partitions; 0 when
    every place is taken (the thread looks once one frees). The runs' tasks are created
    on the workflows' loop without waiting for it (the caller may be that loop)."""
    bell = dispatch.bell_of(queue_name)
    if bell is None or bell.is_set():
        return None
    dbos, queue = bell._dbos, bell.queue
    if queue._has_partition_limits() or dbos._sys_db.sharded:
        return None
    if bell.full():
        bell.backlog = True  # what was enqueued waits for a place: one that frees rings
        return 0
    _verify()
    from dbos._utils import GlobalParams, generate_uuid

    owner = generate_uuid()
    with dispatch.quiet():
        claimed, _ = dbos._sys_db.start_queued_workflows(
            queue,
            GlobalParams.executor_id,
            GlobalParams.app_version,
            None,
            0,
            owner_xid=owner,
            is_latest_version=False,  # runs of this version only: no read of the versions
        )
    if not claimed:
        return 0
    found = {s["workflow_uuid"]: s for s in dbos._sys_db.get_workflow_statuses(claimed)}
    statuses: list[Any] = []
    for workflow_id in claimed:
        try:
            status = found.get(workflow_id) or dbos._sys_db.get_workflow_status(workflow_id)
            if status is None:
                raise LookupError(f"no status for the claimed workflow {workflow_id}")
            statuses.append(status)
        except Exception:  # as the queue's thread does: logged, recovered later
            log.exception("starting the claimed workflow %s failed", workflow_id)
    _start(dbos, statuses, owner)
    return len(claimed)


def _start(dbos: Any, statuses: list[Any], owner: str) -> None:
    """Hand the runs of ``statuses``, claimed by ``owner``, to the workflows' loop."""
    from dbos._core import execute_dequeued_workflow

    _submit_without_waiting(dbos._background_event_loop)
    for status in statuses:
        try:
            _soon.on = True
            try:
                execute_dequeued_workflow(dbos, status, owner)
            finally:
                _soon.on = False
        except Exception:  # as the queue's thread does: logged, recovered later
            log.exception("starting the claimed workflow %s failed", status["workflow_uuid"])


_soon = threading.local()
"""``on`` while this thread hands a claimed run to the workflows' loop."""


def _submit_without_waiting(loop: Any) -> None:
    """Let DBOS's ``loop`` (its ``BackgroundEventLoop``) take a run's start from
    :func:`start_next` without the caller waiting for the loop to create its task: the
    caller may be a console's loop, which a busy workflow loop would hold back, or the
    workflows' loop itself, which cannot wait for itself. The
    run is claimed already; should its task never start (DBOS stopping), it stays
    pending for this executor's recovery, as after a crash. Other submissions wait, as
    DBOS has them."""
    if getattr(loop, _HOOKED, False):
        return
    submit = loop.submit_coroutine

    def submit_coroutine(coro: Coroutine[Any, Any, T]) -> Any:
        if not getattr(_soon, "on", False):
            return submit(coro)
        target = loop.target_loop()
        if target is None:
            coro.close()
            raise RuntimeError("Event loop not started")
        if runs_here(target):  # on that loop already: no wake through its pipe
            target.create_task(coro).add_done_callback(_log_failure)
        else:
            asyncio.run_coroutine_threadsafe(coro, target).add_done_callback(_log_failure)
        return None

    loop.submit_coroutine = submit_coroutine
    setattr(loop, _HOOKED, True)


def _log_failure(started: concurrent.futures.Future[Any] | asyncio.Future[Any]) -> None:
    if not started.cancelled() and started.exception() is not None:
        log.error("a claimed workflow could not start: %s", started.exception())


def verify() -> None:
    """Refuse a DBOS whose queue dispatch is not the one :func:`start_next` reproduces;
    called at launch, so that such a DBOS is refused when the process starts, not at the
    first run :func:`start_next` would start."""
    _verify()


@cache
def _verify() -> None:
    require_known(_source_digest(), _EXPECTED_DIGEST, "its queue dispatch")
    require_known(_insert_digest(), _INSERT_DIGEST, "its enqueue")
