"""No thread hop to start a workflow on a SQLite log, nor to note a result nobody logs.

DBOS 3.4's ``_core`` sends two short operations of a start and a wait to a thread with
``asyncio.to_thread``, and a hop costs more CPU than either (a thread woken, the result
handed back through the loop's self-pipe, the GIL passed twice):

- ``DBOS.start_workflow_async`` writes the run's status row and inputs
  (``_init_workflow``: one short transaction) in a thread, then creates the run's task;
- awaiting a run's handle (``WorkflowHandleAsyncTask.get_result``, or the polling
  handle's) hands ``record_get_result`` to a thread once the result is there; outside a
  workflow that function returns at once, writing nothing (DBOS logs a ``get_result``
  only as a step of the workflow that calls it).

``DBOS.retrieve_workflow_async`` and ``DBOS.get_workflow_status_async`` (in ``dbos._dbos``)
likewise read the run's status row in a thread (``call_function_as_step`` of
``DBOS.getStatus``: the read, and inside a workflow its step check and record).

:func:`install` gives ``dbos._core`` an ``asyncio`` whose ``to_thread`` runs, in the
calling thread and in a copy of its context as a thread would:

- ``record_get_result`` when the caller is not inside a workflow (a no-op), any log;
- on a SQLite log only, ``_init_workflow`` and ``record_get_result`` inside a workflow
  (a local file, one short transaction each that never waits on a network; it may wait
  for SQLite's write lock, which other threads hold for single short transactions, as the
  step log's stages do: :mod:`~tether.durable.hops`);

and ``dbos._dbos`` one whose ``to_thread`` runs the status read of ``DBOS.getStatus`` in
place on a SQLite log only (every other hop of that module keeps its thread).

What is written, in which transaction, and when the run's task starts are DBOS's: only
the thread the call runs in changes, so a crash leaves the log as it did. Everything
else (``get_workflow_status``, the enqueue with options, a step's blocking body, stream
reads) still goes to a thread. The functions named are checked against the pinned DBOS's
source in :func:`install`, which raises :class:`ConfigError`, naming the installed DBOS,
if a release changed them (``tests/durable/test_starts.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tether.durable.fence import require_known, source_digest
from tether.durable.hops import RoutedAsyncio

STATUS_INSERT = "_init_workflow"
"""The status row and inputs of a run started from async code (one transaction)."""

GET_RESULT_NOTE = "record_get_result"
"""A ``get_result`` logged as a step of the calling workflow (nothing outside one)."""

STATUS_READ = "DBOS.getStatus"
"""The operation name of ``call_function_as_step`` when it reads a run's status row."""

_EXPECTED_DIGEST = "93be6080f2845b22"
"""Digest of ``start_workflow_async``, ``_init_workflow``, both async handles' result
waits, ``SystemDatabase.record_get_result`` and ``call_function_as_step``, and
``DBOS.retrieve_workflow_async`` and ``DBOS.get_workflow_status_async`` in DBOS 3.4.0."""


def _source_digest() -> str:
    from dbos import DBOS, _core
    from dbos._sys_db import SystemDatabase

    return source_digest(
        _core.start_workflow_async,
        _core._init_workflow,
        _core.WorkflowHandleAsyncTask._get_result,
        _core.WorkflowHandleAsyncPolling._get_result,
        SystemDatabase.record_get_result,
        SystemDatabase.call_function_as_step,
        DBOS.retrieve_workflow_async,
        DBOS.get_workflow_status_async,
    )


def _in_workflow() -> bool:
    from dbos._context import get_local_dbos_context

    ctx = get_local_dbos_context()
    return ctx is not None and ctx.is_workflow()


class _Asyncio(RoutedAsyncio):
    """``asyncio`` as ``dbos._core`` or ``dbos._dbos`` sees it: the calls named in the
    module docstring inline."""

    def __init__(self, base: Any) -> None:
        super().__init__(base)
        self.sqlite_log = False

    def inline(self, func: Callable[..., Any], args: tuple[Any, ...]) -> bool:
        """Whether ``func(*args)`` runs in the caller's thread (see the module docstring)."""
        name = getattr(func, "__name__", "")
        if name == GET_RESULT_NOTE:
            return self.sqlite_log or not _in_workflow()
        if name == "call_function_as_step":
            return self.sqlite_log and len(args) > 1 and args[1] == STATUS_READ
        return self.sqlite_log and name == STATUS_INSERT


def _known(current: Any) -> bool:
    """Whether ``current`` (a DBOS module's ``asyncio``) is ``asyncio`` itself or one of
    tether's routings of its hops."""
    return current is asyncio or type(current).__module__.startswith("tether.durable.")


def install(sqlite_log: bool) -> None:
    """Route the thread hops of ``dbos._core`` and ``dbos._dbos`` through
    :class:`_Asyncio` (the status insert and read inline only with ``sqlite_log``);
    idempotent, and a later call sets ``sqlite_log`` anew."""
    from dbos import _core, _dbos

    modules = (_core, _dbos)
    ours = all(_known(getattr(m, "asyncio", None)) for m in modules)
    known = _source_digest() if ours else "another asyncio"
    require_known(known, _EXPECTED_DIGEST, "its workflow start and result note")
    for module in modules:
        current = module.asyncio
        if not isinstance(current, _Asyncio):
            current = _Asyncio(current)
            setattr(module, "asyncio", current)  # noqa: B010 (a private module attribute)
        current.sqlite_log = sqlite_log
