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

The DBOS code the start reproduces (the queue thread's dispatch of what it claimed) is
checked against the pinned release's source; a release that changed it is refused with
:class:`ConfigError`, naming the installed DBOS (``tests/durable/test_handoff.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from functools import cache
from typing import Any, TypeVar

from tether.durable import dispatch
from tether.durable.fence import require_known, source_digest
from tether.durable.loops import runs_here

log = logging.getLogger("tether.durable")
T = TypeVar("T")
_HOOKED = "_tether_handoff"

_EXPECTED_DIGEST = "80c29eadfae2cc72"
"""Digest of DBOS 3.4.0's queue thread (its dispatch of the runs it claimed),
``execute_dequeued_workflow`` and the event loop's ``submit_coroutine``."""


def _source_digest() -> str:
    from dbos import _core, _event_loop

    return source_digest(
        dispatch.dbos_queue_worker(),
        _core.execute_dequeued_workflow,
        _event_loop.BackgroundEventLoop.submit_coroutine,
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
    from dbos._core import execute_dequeued_workflow
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
    _submit_without_waiting(dbos._background_event_loop)
    for workflow_id in claimed:
        try:
            status = found.get(workflow_id) or dbos._sys_db.get_workflow_status(workflow_id)
            if status is None:
                raise LookupError(f"no status for the claimed workflow {workflow_id}")
            _soon.on = True
            try:
                execute_dequeued_workflow(dbos, status, owner)
            finally:
                _soon.on = False
        except Exception:  # as the queue's thread does: logged, recovered later
            log.exception("starting the claimed workflow %s failed", workflow_id)
    return len(claimed)


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
