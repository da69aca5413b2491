"""A queue thread that looks at its queue when there is something to take.

DBOS 3.4's thread for a queue looks at it once per polling interval, whatever happened in
between: a place freed by a run that ended stays empty until the next look, and an idle
worker looks ten times a second for nothing. :func:`install` gives each queue thread of
this process a doorbell it waits on instead of the bare interval:

- it rings when one of this process's runs of the queue ends (a place frees) and when
  this process enqueues to the queue (through DBOS, or a :class:`dbos.DBOSClient` passed
  to :func:`watch_client`): the thread looks at once;
- while every place of this worker is taken, the thread does not look until one frees
  (at most :data:`FULL_SECONDS` between looks);
- while the queue is found empty, the time between looks grows from the queue's polling
  interval to a quarter of how long it has been empty, up to :data:`IDLE_SECONDS`: work
  enqueued by another process waits at most that long (a decision taken in a console
  process while tickets flow, at most the polling interval); in this process the
  doorbell rings at once;
- on PostgreSQL, a run queued by any process rings it too (:mod:`~tether.durable.wakeup`:
  a notification from the database); while that works, an empty queue is looked at only
  every :data:`LISTENED_IDLE_SECONDS`, as a fallback.

What a look does (the claims, their limits and transactions) is DBOS's, unchanged (its
statements built once by :mod:`~tether.durable.claim`, through :func:`use_claim`). The
DBOS code it hooks is checked against the pinned release's source; a release that changed
it is refused with :class:`ConfigError`, naming the installed DBOS
(``tests/durable/test_dispatch.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tether.durable.fence import require_known, source_digest

IDLE_SECONDS = 1.0
"""The longest time between two looks at a queue found empty (a look at once when this
process enqueues to it)."""

LISTENED_IDLE_SECONDS = 10.0
"""The same while PostgreSQL wakes this process when a run is queued
(:mod:`~tether.durable.wakeup`): a look that finds nothing is then only a fallback."""

IDLE_SHARE = 0.25
"""The time between looks at a queue found empty, as a share of how long it has been."""

FULL_SECONDS = 5.0
"""The longest time between two looks while every place of this worker is taken (a look
at once when one frees)."""

CLAIM_SECONDS = 10.0
"""How long a claimed run holds a place before DBOS registers it as running."""

_EXPECTED_DIGEST = "1824adfb797eb12e"
"""Digest of the queue threads, the active-run registry and the enqueue and claim methods
of DBOS 3.4.0."""

_HOOKED = "_tether_doorbells"
"""Set on each DBOS object whose methods ring the doorbells."""

_CLAIM = "_tether_claim"
"""Set on a system database whose claims :func:`use_claim` replaced."""

_CLAIM_LOCK = threading.Lock()


def _source_digest() -> str:
    from dbos import _core, _queue
    from dbos._sys_db import SystemDatabase

    return source_digest(
        dbos_queue_worker(),
        _queue.queue_thread,
        _core.ActiveWorkflowById,
        SystemDatabase.init_workflow,
        SystemDatabase.init_child_workflow,
        SystemDatabase.start_queued_workflows,
    )


class Doorbell:
    """The stop event one queue thread waits on: DBOS's own, with a bell beside it."""

    def __init__(self, stop: threading.Event, dbos: Any, queue: Any) -> None:
        self._stop = stop
        self._bell = threading.Event()
        self._bell.set()  # a new thread looks at once
        self._dbos = dbos
        self.queue = queue
        """The queue's settings as last seen by a look."""
        self.empty_since: float | None = None
        """When a look first found nothing to take and room to take it (``None``: the
        last look took something, or found no room)."""
        self.claimed: dict[str, float] = {}
        """Runs claimed by a look and not yet registered as running (DBOS registers a
        claimed run once it starts), with when: they hold a place meanwhile."""
        self.backlog = True
        """Whether runs may be left in the queue for this worker: the last claim filled
        every place it had, or found none free. A run of this process that ends rings the
        bell only then (else the queue was found empty, and a run enqueued since rang
        the bell itself, or waits for the next look if another process enqueued it)."""
        self.claiming = threading.Lock()
        """Held by each claim, the thread's or one made at once in another thread of this
        process (:mod:`~tether.durable.handoff`): one at a time, each counting the
        places the others took."""

    def ring(self) -> None:
        """Make the thread look at its queue now (or, mid-look, once more after it)."""
        self._bell.set()

    def is_set(self) -> bool:
        return self._stop.is_set()

    def set(self) -> None:
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until rung, stopped or ``timeout`` (stretched while full or empty) ends;
        whether the thread should stop."""
        if not self._stop.is_set():
            self._bell.wait(self.interval(timeout))
        self._bell.clear()  # before the look, which sees whatever rang
        return self._stop.is_set()

    def interval(self, timeout: float | None) -> float | None:
        """How long to wait for the bell instead of DBOS's ``timeout``."""
        if timeout is None:
            return None
        if self.full():
            return max(timeout, FULL_SECONDS)
        if self.empty_since is not None:
            stretched = (time.monotonic() - self.empty_since) * IDLE_SHARE
            longest = LISTENED_IDLE_SECONDS if _listened.is_set() else IDLE_SECONDS
            return max(timeout, min(stretched, longest))
        return timeout

    def unregistered(self) -> int:
        """Runs claimed that DBOS has not registered yet (forgotten after
        :data:`CLAIM_SECONDS`: one that failed before it started never registers)."""
        if not self.claimed:
            return 0
        since = time.monotonic() - CLAIM_SECONDS
        for key, at in list(self.claimed.items()):
            if at < since:
                self.claimed.pop(key, None)
        return len(self.claimed)

    def full(self) -> bool:
        """Whether every place of this worker on the queue is taken (runs claimed and not
        yet registered count)."""
        places = getattr(self.queue, "_worker_concurrency", None)
        if places is None:
            return False
        return bool(self._dbos._active_workflows_set.count_for_queue(self.queue.name) >= places)


_BELLS: dict[str, Doorbell] = {}
"""This process's doorbells, by queue name."""

_quiet = threading.local()
"""``on`` in a thread inside :func:`quiet`."""

_dbos_worker: Callable[[Any, Any, Any], None] | None = None
"""DBOS's own queue thread function."""


def dbos_queue_worker() -> Callable[..., None]:
    """DBOS's own queue thread function, whether or not :func:`install` replaced it."""
    from dbos import _queue

    return (
        _dbos_worker
        if _queue.queue_worker_thread is _worker and _dbos_worker
        else _queue.queue_worker_thread
    )


def is_claimed(workflow_id: str) -> bool:
    """Whether a look of this process claimed ``workflow_id`` and DBOS has not yet
    registered it as running."""
    return any(workflow_id in bell.claimed for bell in list(_BELLS.values()))


def bell_of(queue_name: str) -> Doorbell | None:
    """The doorbell of ``queue_name``'s thread in this process (``None``: no thread)."""
    return _BELLS.get(queue_name)


@contextmanager
def quiet() -> Iterator[None]:
    """Enqueues made inside, in this thread, ring no doorbell, and claims made inside
    leave the queue thread's pace as it was (the caller starts what it queued itself:
    :mod:`~tether.durable.handoff`)."""
    _quiet.on = True
    try:
        yield
    finally:
        _quiet.on = False


_listened = threading.Event()
"""Set while a notification wakes this process when a run is queued by any process."""


def listened(on: bool) -> None:
    """Say whether queued runs wake this process (a look at an empty queue is then a
    fallback, :data:`LISTENED_IDLE_SECONDS` apart)."""
    if on:
        _listened.set()
    else:
        _listened.clear()


def ring_all() -> None:
    """Ring every doorbell of this process."""
    for bell in list(_BELLS.values()):
        bell.ring()


def ring(queue_name: str | None) -> None:
    """Ring the doorbell of ``queue_name``'s thread in this process, if it has one."""
    if queue_name is not None and not getattr(_quiet, "on", False):
        bell = _BELLS.get(queue_name)
        if bell is not None:
            bell.ring()


def install() -> None:
    """Give the queue threads DBOS starts from now on a doorbell each (call it before
    ``DBOS.launch``); idempotent."""
    global _dbos_worker
    from dbos import _queue

    if _queue.queue_worker_thread is _worker:
        return
    require_known(_source_digest(), _EXPECTED_DIGEST, "its queue dispatch")
    _dbos_worker = _queue.queue_worker_thread
    _queue.queue_worker_thread = _worker


def watch_client(client: Any) -> None:
    """Ring this process's doorbells when ``client`` (a :class:`dbos.DBOSClient`)
    enqueues."""
    _ring_after_enqueue(client._sys_db)


def _worker(stop_event: threading.Event, dbos: Any, queue: Any) -> None:
    """DBOS's queue thread, waiting on a :class:`Doorbell`."""
    assert _dbos_worker is not None
    bell = Doorbell(stop_event, dbos, queue)
    _BELLS[queue.name] = bell
    _ring_on_stop(stop_event, bell)
    _hook(dbos)
    try:
        _dbos_worker(bell, dbos, queue)
    finally:
        if _BELLS.get(queue.name) is bell:
            del _BELLS[queue.name]


def _ring_on_stop(stop: threading.Event, bell: Doorbell) -> None:
    """Stopping DBOS (it sets ``stop``) rings ``bell``, so its thread stops at once."""
    bells: list[Doorbell] | None = getattr(stop, _HOOKED, None)
    if bells is None:
        every: list[Doorbell] = []
        real_set = stop.set

        def set_and_ring() -> None:
            real_set()
            for b in list(every):
                b.ring()

        setattr(stop, _HOOKED, every)
        stop.set = set_and_ring  # type: ignore[method-assign]
        bells = every
    bells.append(bell)


def _hook(dbos: Any) -> None:
    """Let ``dbos``'s runs, enqueues and looks reach the doorbells (once per DBOS)."""
    if getattr(dbos, _HOOKED, False):
        return
    setattr(dbos, _HOOKED, True)
    active = dbos._active_workflows_set
    add, remove, count = active.add, active._remove, active.count_for_queue

    def add_registered(key: str, queue_name: str | None = None, *args: Any, **kw: Any) -> Any:
        entry = add(key, queue_name, *args, **kw)
        bell = _BELLS.get(queue_name) if queue_name is not None else None
        if bell is not None:
            bell.claimed.pop(key, None)
        return entry

    def remove_and_ring(key: str, bucket: Any) -> None:
        remove(key, bucket)
        bell = _BELLS.get(bucket[0]) if bucket is not None else None
        if bell is not None and bell.backlog:
            ring(bucket[0])

    def count_with_claimed(queue_name: str) -> int:
        bell = _BELLS.get(queue_name)
        return int(count(queue_name)) + (bell.unregistered() if bell is not None else 0)

    active.add = add_registered
    active._remove = remove_and_ring
    active.count_for_queue = count_with_claimed
    sys_db = dbos._sys_db
    _ring_after_enqueue(sys_db)
    with _CLAIM_LOCK:
        sys_db.start_queued_workflows = _noting_claims(sys_db, sys_db.start_queued_workflows)


def use_claim(sys_db: Any, claim: Callable[..., Any]) -> None:
    """Make ``claim`` the method behind ``sys_db.start_queued_workflows``, under the
    doorbell's notes whether the queue thread has already hooked it or not."""
    with _CLAIM_LOCK:
        setattr(sys_db, _CLAIM, claim)
        if not getattr(sys_db.start_queued_workflows, _HOOKED, False):
            sys_db.start_queued_workflows = claim


def _ring_after_enqueue(sys_db: Any) -> None:
    if getattr(sys_db, _HOOKED, False):
        return
    setattr(sys_db, _HOOKED, True)
    sys_db.init_workflow = _ringing(sys_db.init_workflow)
    sys_db.init_child_workflow = _ringing(sys_db.init_child_workflow)


def _ringing(enqueue: Callable[..., Any]) -> Callable[..., Any]:
    def enqueue_and_ring(status: Any, *args: Any, **kwargs: Any) -> Any:
        out = enqueue(status, *args, **kwargs)  # committed: a look now sees it
        ring(status.get("queue_name"))
        return out

    return enqueue_and_ring


def _noting_claims(sys_db: Any, stock: Callable[..., Any]) -> Callable[..., Any]:
    def start_queued_workflows(queue: Any, *args: Any, **kwargs: Any) -> Any:
        claim = getattr(sys_db, _CLAIM, stock)
        bell = _BELLS.get(queue.name)
        if bell is None:
            return claim(queue, *args, **kwargs)
        with bell.claiming:  # one claim at a time, each counting the places others took
            args, load = _counting(bell, queue, args)
            claimed, stopped_by = claim(queue, *args, **kwargs)
            bell.queue = queue
            now = time.monotonic()
            bell.claimed.update((key, now) for key in claimed)
            places = getattr(queue, "_worker_concurrency", None)
            filled = places is not None and len(claimed) >= places - load
            bell.backlog = stopped_by is not None or filled
            if getattr(_quiet, "on", False):  # this process's own runs: the pace is unchanged
                return claimed, stopped_by
            if claimed or stopped_by is not None:
                bell.empty_since = None
            elif bell.empty_since is None:
                bell.empty_since = now
        return claimed, stopped_by

    setattr(start_queued_workflows, _HOOKED, True)
    return start_queued_workflows


def _counting(bell: Doorbell, queue: Any, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], int]:
    """The claim's arguments with its local running count (after the executor, the
    version and the partition) no lower than the places this process holds now."""
    held = bell._dbos._active_workflows_set.count_for_queue(queue.name)
    load = max(int(args[3]) if len(args) > 3 else 0, held)
    return (*args[:3], load, *args[4:]), load
