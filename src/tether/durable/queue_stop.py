"""A stop that lets a queue's claim in flight hand its run over before the loop stops.

``DBOS.destroy`` (DBOS 3.4) sets its threads' stop events, stops the workflows' event loop,
and only then joins its threads. A queue thread that had just claimed a run (committed:
the run is this executor's now) then hands it to a loop that is gone: DBOS logs "Error
executing workflow" and the coroutine that would have started it is never awaited (a
``RuntimeWarning`` at exit). Nothing is lost (the run is pending for this executor and the
next launch recovers it), but a clean stop printed an error. :func:`settle`, called by
:func:`~tether.durable.runtime.shutdown` just before ``DBOS.destroy``, sets the same stop
events and waits (at most :data:`SETTLE_SECONDS`) for DBOS's queue manager, which waits for
each queue's thread: a claim in flight hands its run to a loop that still runs, where it
finishes or is cancelled by the stop like any other run, and resumes at the next launch.
Called on the workflows' own loop (a plain :func:`~tether.durable.runtime.shutdown` from
``async`` code), it does not wait: the run would be handed to that very loop, blocked in
the stop.

What this relies on (the stop's order, the queue manager's join of its threads, the hand-
over onto the loop) is checked against the pinned DBOS's source at launch: a release that
changed it is refused with :class:`~tether.errors.ConfigError`.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from tether.durable.fence import require_known, source_digest
from tether.durable.loops import runs_here

SETTLE_SECONDS = 10.0
"""The longest a stop waits for the queue threads (DBOS's own join waits as long)."""

_EXPECTED_DIGEST = "71cf3f342baca082"
"""Digest of ``DBOS._destroy``, the queue manager thread and the event loop's hand-over in
DBOS 3.4.0."""


@cache
def _source_digest() -> str:
    from dbos import _queue
    from dbos._dbos import DBOS
    from dbos._event_loop import BackgroundEventLoop

    return source_digest(
        DBOS._destroy,
        _queue.queue_thread,
        BackgroundEventLoop.stop,
        BackgroundEventLoop.target_loop,
        BackgroundEventLoop.submit_coroutine,
    )


def verify() -> None:
    """Refuse a DBOS whose stop or queue threads are not the ones :func:`settle` knows."""
    require_known(_source_digest(), _EXPECTED_DIGEST, "its stop or its queue threads")


def settle(dbos: Any) -> bool:
    """Stop ``dbos``'s (the running DBOS instance's) background threads and wait for its
    queue threads to end; ``False``, having changed nothing, when called on the loop the
    queue threads hand their runs to."""
    from dbos import _queue

    target = dbos._background_event_loop.target_loop()
    if target is not None and runs_here(target):
        return False
    for event in list(dbos.background_thread_stop_events):
        event.set()
    for thread in list(dbos._background_threads):
        if getattr(thread, "_target", None) is _queue.queue_thread:
            thread.join(SETTLE_SECONDS)
    return True
