"""Durable runs on DBOS: a run survives its worker, an approval waits as long as it takes.

Install with ``pip install 'tether[durable]'``. Importing this package imports DBOS (not
``import tether``). See docs/durable.md::

    support = DurableAgent(agent, "support")
    launch(DurableConfig("sqlite:///runs.sqlite"))
    result = await support.run("Where is my order C-1042?")
"""

from __future__ import annotations

from tether.durable.runtime import (
    DEFAULT_DATABASE_URL,
    DurableConfig,
    is_launched,
    launch,
    own_executor,
    recover,
    recover_async,
    running_workflow_ids,
    shutdown,
    shutdown_async,
    tune_client,
)
from tether.durable.steps import DurableChatClient, DurableTool, StepBook
from tether.durable.transaction import TransactionalTool
from tether.durable.workflow import (
    DECISIONS_TOPIC,
    PENDING_EVENT,
    DurableAgent,
    await_decisions,
    idempotency_key,
    make_durable,
    pending_state,
    publish_pending,
    send_decisions,
)

__all__ = [
    "DECISIONS_TOPIC",
    "DEFAULT_DATABASE_URL",
    "PENDING_EVENT",
    "DurableAgent",
    "DurableChatClient",
    "DurableConfig",
    "DurableTool",
    "StepBook",
    "TransactionalTool",
    "await_decisions",
    "idempotency_key",
    "is_launched",
    "launch",
    "make_durable",
    "own_executor",
    "pending_state",
    "publish_pending",
    "recover",
    "recover_async",
    "running_workflow_ids",
    "send_decisions",
    "shutdown",
    "shutdown_async",
    "tune_client",
]
