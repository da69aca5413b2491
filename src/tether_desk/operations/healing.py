"""Faults that heal by themselves.

* Inside a step, a transient database error (locked, disk full, I/O error, connection
  lost) is retried with exponential backoff
  (:func:`tether_desk.operations.transient.retry_transient`) before the step
  fails: a step body runs again to the same effect (see :mod:`tether_desk.durable.flow`).
* A run that failed on such an error anyway, or that a failed write of the durable log
  left pending with no execution in this process, is resumed once the fault clears
  (:class:`Healer`, run every few seconds by each process that runs tickets): no restart.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from tether.durable import running_workflow_ids
from tether_desk.operations import runs as ops
from tether_desk.operations.transient import is_transient

log = logging.getLogger("tether_desk")
MAX_RETRIES = 5
"""A run that fails on a transient error this many times is left to an operator (it
shows as ERROR, needing attention)."""


class Healer:
    """Resumes this executor's runs that a cleared fault left behind (see the module doc).
    A pending run must be seen without an execution twice in a row, its row unchanged in
    between, before it is resumed. A run taken from the queue is registered as executing
    only once its task starts, a moment (under load, seconds) after its row says PENDING:
    seen in that moment after a first look that found it pending from before (recovered
    at a restart, dispatched again since), it is not left behind, and resuming it would
    start a second execution beside the one about to run (every step not yet logged
    done twice). Each dispatch moves the row's ``updated_at``, so only a run that
    nothing dispatched between the two looks is resumed."""

    def __init__(self, client: Any, db: Any, executor_id: str, version: str) -> None:
        self.client = client
        self.db = db
        self.executor_id = executor_id
        self.version = version
        self._suspects: set[tuple[str, int | None]] = set()
        """(workflow id, ``updated_at``) of the runs seen pending
        without an execution at the last look."""
        self._retried: Counter[str] = Counter()

    def heal(self) -> list[str]:
        """One pass; returns what it resumed."""
        healed = []
        failed = self.client.list_workflows(
            name=ops.NAMES, status="ERROR", app_version=self.version, load_input=False
        )
        for w in failed:
            if is_transient(w.error) and self._retried[w.workflow_id] < MAX_RETRIES:
                self._retried[w.workflow_id] += 1
                said = ops.retry(self.client, self.db, w.workflow_id, self.version)
                log.warning("healed after a transient fault: %s", said)
                healed.append(w.workflow_id)
        pending = self.client.list_workflows(
            name=ops.NAMES,
            status="PENDING",
            executor_id=self.executor_id,
            app_version=self.version,
            load_input=False,
            load_output=False,
        )
        active = running_workflow_ids()
        orphans = {_seen(w): w for w in pending if w.workflow_id not in active}
        for key in self._suspects & orphans.keys():
            wid = key[0]
            self.client.resume_workflow(wid, queue_name=orphans[key].queue_name)
            log.warning("resumed %s, left pending with no execution by a fault", wid)
            healed.append(wid)
        self._suspects = {k for k in orphans if k[0] not in healed}
        return healed


def _seen(w: Any) -> tuple[str, int | None]:
    """A pending run as one look saw it: a dispatch since changes the key."""
    return (w.workflow_id, w.updated_at)
