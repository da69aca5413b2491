"""Fewer thread hops around an async workflow's logged operations.

DBOS 3.4 runs every stage of an async step or workflow through ``asyncio.to_thread``:
the log check before a step, the record after it, the workflow's outcome, and, for each
``Pending.then``, a function that only returns the next stage (it does nothing at all).
A hop costs more CPU than a quick operation itself (a thread woken, the result handed
back through the loop's self-pipe, the GIL passed twice), and a durable desk ticket made
13 of them.

:func:`install` gives DBOS's ``dbos._outcome`` module an ``asyncio`` whose ``to_thread``
runs in the calling thread, in a copy of the context as a thread would:

- always, the stage that only returns the next one (no I/O, nothing to wait for);
- the step check, the step record and the workflow's outcome: one short statement each
  (one transaction on SQLite, one statement in autocommit on PostgreSQL), shorter than the
  hop around it. On SQLite it may wait for the write lock, which other threads hold for
  single short transactions; on PostgreSQL it waits for one round trip to the server,
  during which the workflows' loop runs nothing else. Measured on PostgreSQL (one ``tether
  worker``, ``bench/durable_worker.py``): a third fewer context switches per ticket, a
  millisecond less system time, no fewer tickets a second. :func:`~tether.durable.launch`
  runs them here on SQLite and, on PostgreSQL, only when
  :attr:`~tether.durable.DurableConfig.log_on_loop` says so (for a loop that runs nothing
  but workflows: while the database is unreachable, DBOS's retries then hold the loop);
  ``install(inline_log=False)`` keeps them in threads.

Everything else (a synchronous step's body, any other function) still goes to a thread.
The names are checked against the pinned DBOS's source in :func:`install`, which raises
:class:`ConfigError`, naming the installed DBOS, if a release changed them
(``tests/durable/test_hops.py`` says so too).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any, TypeVar

from tether.durable.fence import require_known, source_digest

T = TypeVar("T")

NO_OP_STAGE = "Pending.then.<locals>.<lambda>.<locals>.<lambda>"
"""``Pending.then``'s ``lambda: next``: it returns the next stage and does nothing else."""

LOG_STAGES = frozenset(
    {
        "invoke_step.<locals>.check_existing_result",
        "invoke_step.<locals>.record_step_result",
        "_get_wf_invoke_func.<locals>.persist",
    }
)
"""The step check, the step record and the workflow's outcome: one short statement each."""

_EXPECTED_DIGEST = "095f5a33a5b8ce04"
"""Digest of ``dbos._outcome.Pending`` and the functions defining the stages above (3.4.0)."""


def _source_digest() -> str:
    from dbos import _core, _outcome

    return source_digest(_outcome.Pending, _core.invoke_step, _core._get_wf_invoke_func)


class RoutedAsyncio:
    """``asyncio`` as one DBOS module sees it: all of ``base`` (``asyncio``, or another
    routing of that module's hops), but ``to_thread``, which runs the calls :meth:`inline`
    names in the calling thread, in a copy of its context as a thread would."""

    def __init__(self, base: Any) -> None:
        self.base = base

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def inline(self, func: Callable[..., Any], args: tuple[Any, ...]) -> bool:
        """Whether ``func(*args)`` runs in the caller's thread (none, here)."""
        return False

    async def to_thread(self, func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        if self.inline(func, args):
            return contextvars.copy_context().run(func, *args, **kwargs)
        result: T = await self.base.to_thread(func, *args, **kwargs)
        return result


class _Asyncio(RoutedAsyncio):
    """``asyncio`` as DBOS's ``_outcome`` module sees it: the no-op stage inline, and the
    log's stages with ``inline_log``."""

    def __init__(self) -> None:
        super().__init__(asyncio)
        self.inline_log = False

    def inline(self, func: Callable[..., Any], args: tuple[Any, ...]) -> bool:
        name = getattr(func, "__qualname__", "")
        return name == NO_OP_STAGE or (self.inline_log and name in LOG_STAGES)


_PROXY = _Asyncio()


def install(inline_log: bool) -> None:
    """Route DBOS's stage hops through :class:`_Asyncio` (the log stages inline only with
    ``inline_log``); idempotent, and a later call sets ``inline_log`` anew."""
    from dbos import _outcome

    current = getattr(_outcome, "asyncio", None)
    known = _source_digest() if current in (asyncio, _PROXY) else "another asyncio"
    require_known(known, _EXPECTED_DIGEST, "its async stages")
    _PROXY.inline_log = inline_log
    setattr(_outcome, "asyncio", _PROXY)  # noqa: B010 (a private module attribute)
