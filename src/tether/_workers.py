"""Worker threads for sync tools that the event loop never waits for.

``asyncio.to_thread`` uses the loop's default executor, which ``asyncio.run`` joins on exit:
a sync tool that ignores its run's deadline would hold the caller long after the run ended.
These workers are daemon threads outside any loop; idle ones are reused, and a new one starts
whenever none is free, so a stuck tool never blocks another call.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")
IDLE_SECONDS = 60.0

_Job = tuple[Future[Any], Callable[[], Any]]
_jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
_idle = threading.Semaphore(0)


def _work() -> None:
    while True:
        try:
            future, fn = _jobs.get(timeout=IDLE_SECONDS)
        except queue.Empty:
            if _idle.acquire(blocking=False):
                return  # idle too long and nobody counts on this worker
            continue  # a job was promised to an idle worker: stay for it
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)
        _idle.release()


def _submit(fn: Callable[[], Any]) -> Future[Any]:
    future: Future[Any] = Future()
    _jobs.put((future, fn))
    if not _idle.acquire(blocking=False):
        threading.Thread(target=_work, name="tether-tool", daemon=True).start()
    return future


async def run_in_worker(func: Callable[..., T], /, **kwargs: Any) -> T:
    """Run ``func(**kwargs)`` in a worker thread (with the caller's context variables).

    Cancelling the await stops waiting at once; the function, if it already started, runs
    on to its end in its thread (it cannot be stopped), and its result is dropped.
    """
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()
    job = _submit(lambda: context.run(func, **kwargs))

    def deliver(done: Future[Any]) -> None:
        def settle() -> None:
            if waiter.done():
                return
            if done.cancelled():
                waiter.cancel()
            elif (exc := done.exception()) is not None:
                waiter.set_exception(exc)
            else:
                waiter.set_result(done.result())

        # RuntimeError: the loop has closed, and nobody waits for this result any more
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle)

    job.add_done_callback(deliver)
    try:
        return await waiter
    except asyncio.CancelledError:
        job.cancel()  # only succeeds if it has not started
        raise
