"""Processes forked from the test's own, which never outlive it."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from typing import Any

FORK = multiprocessing.get_context("fork")
"""Queues and barriers shared with :func:`run_forked`'s processes come from here."""


def run_forked(
    target: Callable[..., object], arg_lists: Sequence[tuple[Any, ...]], seconds: float = 60
) -> list[int | None]:
    """``target(*args)`` in a forked process per ``args``, all started, then awaited together
    for up to ``seconds``: their exit codes (``None``: still running, then killed). A child
    that hangs (a lock some thread of the parent held at the fork) fails its test instead of
    keeping the interpreter from exiting, which waits for its non-daemon children."""
    procs = [FORK.Process(target=target, args=args, daemon=True) for args in arg_lists]
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + seconds
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        return [p.exitcode for p in procs]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
