"""The desk on durable runs (DBOS): tickets through a queue that workers share, a worker
killed anywhere losing nothing, approvals that wait as long as staff take.

Importing this package imports DBOS and registers the desk's workflows. See
:mod:`tether_desk.durable.flow` (the workflows), :mod:`tether_desk.durable.runner` (DBOS in
a process, the queue, decisions) and docs/durable.md.
"""

from __future__ import annotations

from tether_desk.durable.boundaries import Boundary
from tether_desk.durable.flow import (
    APPROVAL_WORKFLOW,
    FINISH_WORKFLOW,
    TICKET_WORKFLOW,
    finish_id,
    wait_id,
    workflow_id,
)
from tether_desk.durable.runner import (
    APP_NAME,
    APP_VERSION,
    QUEUE,
    DurableDesk,
    DurableSettings,
    system_database_url,
)

__all__ = [
    "APPROVAL_WORKFLOW",
    "APP_NAME",
    "APP_VERSION",
    "FINISH_WORKFLOW",
    "QUEUE",
    "TICKET_WORKFLOW",
    "Boundary",
    "DurableDesk",
    "DurableSettings",
    "finish_id",
    "system_database_url",
    "wait_id",
    "workflow_id",
]
