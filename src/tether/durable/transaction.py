"""A tool whose writes and whose step log entry commit in one database transaction.

Wrap a tool that writes to your database (a refund ledger, an order's status) in
:class:`TransactionalTool` with a DBOS :class:`~dbos.SQLAlchemyDatasource` on that
database; the tool reads and writes through ``datasource.sql_session()``. Outside a
workflow the tool runs in one transaction. In durable mode it is a DBOS *transactional
step*: DBOS writes the step's output in the same transaction as the tool's rows, so after
a crash either both are there (the step is replayed, the tool does not run again) or
neither is (the tool runs again, from scratch). A ledger write is then exactly once even
without an idempotency key; keep the key anyway, for calls that run outside a workflow.

A failing call (the tool raises) rolls its transaction back; the failure is logged and
replayed like any other tool error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

from dbos import SQLAlchemyDatasource, StepReservation
from dbos._context import _set_local_dbos_context, get_local_dbos_context

from tether.durable import codec
from tether.tools import DelegatingTool, RunContext, Tool

RESERVED_STEP: ContextVar[tuple[StepReservation | None, str] | None] = ContextVar(
    "tether_reserved_step", default=None
)
"""Set by :class:`~tether.durable.DurableTool` around a transactional call in a
workflow: the step number reserved for the call, and the step's name."""


class LoggedToolFailure(Exception):
    """Raised inside the transaction to roll it back while logging the tool's failure;
    ``data`` is the failure as :mod:`tether.durable.codec` stores it."""

    def __init__(self, data: codec.JSON) -> None:
        super().__init__(data)
        self.data = data


class TransactionalTool(DelegatingTool):
    """Runs ``inner`` inside one transaction of ``datasource`` (see the module docstring)."""

    def __init__(self, inner: Tool, datasource: SQLAlchemyDatasource) -> None:
        super().__init__(inner)
        self.datasource = datasource

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        slot = RESERVED_STEP.get()
        if slot is None:  # not in durable mode: one plain transaction
            logged = await asyncio.to_thread(self._transaction, arguments, ctx, self.name)
            return codec.tool_outcome_from_json(logged)
        reservation, step_name = slot
        workflow_ctx = get_local_dbos_context()
        if workflow_ctx is not None and self.datasource not in workflow_ctx.used_datasources:
            workflow_ctx.used_datasources.append(self.datasource)  # its rows go at the end

        def at_reserved_step() -> codec.JSON:
            if reservation is not None:
                # DBOS runs a datasource transaction at the next step number of the
                # context it finds; give it, in this thread only, the context the
                # reservation holds, one number back. (No public call takes a reservation.)
                step_ctx = reservation._step_ctx
                step_ctx.function_id -= 1
                _set_local_dbos_context(step_ctx)
            return self._transaction(arguments, ctx, step_name)

        logged = await asyncio.to_thread(at_reserved_step)
        return codec.tool_outcome_from_json(logged)

    def _transaction(
        self, arguments: Mapping[str, Any], ctx: RunContext[Any], name: str
    ) -> codec.JSON:
        def body() -> codec.JSON:
            try:
                text = asyncio.run(self.inner.invoke(arguments, ctx))
            except Exception as exc:
                raise LoggedToolFailure(codec.tool_error_to_json(exc)) from None
            return {"text": text}

        try:
            result: codec.JSON = self.datasource.run_tx_step({"name": name}, body)
        except LoggedToolFailure as failure:
            return failure.data
        return result
