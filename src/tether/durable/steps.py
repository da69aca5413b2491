"""Each model request and each tool execution as a DBOS step, by two wrappers.

:class:`DurableChatClient` runs ``complete`` as a step; :class:`DurableTool` runs
``invoke`` as a step. The loop itself is unchanged: inside a workflow, a step whose
output is in the log returns it without running again, so a restarted worker replays a
run up to where it stopped and carries on from there.

**Step order is deterministic.** DBOS numbers steps in the order they start. A turn's
calls run concurrently and finish in any order, so each call's step number is drawn in
advance, in the model's order, as soon as the model's reply is known
(``DBOS.reserve_step``): the same reply always gives the same numbering, whatever runs
first. The reply's call ids are made unique in the run at the same point, so the loop
never renames a call and every call keeps the id its idempotency key is derived from.

**A tool's own ruling is a step too** when the tool (or a wrapper) overrides
``Tool.ruling``: such a ruling may read a database (what remains to refund, whether a
proposal already waits), and a replay must take the path the first execution took, not
the one today's data would give. Its approval context is computed in the same step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from dbos import DBOS, StepReservation

from tether.clients import (
    BaseChatClient,
    ChatClient,
    ChatOptions,
    ChatResponse,
)
from tether.durable import codec
from tether.durable.transaction import RESERVED_STEP, TransactionalTool
from tether.errors import InvalidHistoryError
from tether.messages import Message, ToolCall
from tether.replay.cassette import response_to_dict
from tether.rulings import Ruling
from tether.tools import DelegatingTool, RunContext, Tool, ToolSpec

MODEL_STEP = "tether.model"
TOOL_STEP = "tether.tool."
RULING_STEP = "tether.ruling."


class StepBook:
    """The step numbers reserved for one run's tool calls, by call id."""

    __slots__ = ("_reserved",)

    def __init__(self) -> None:
        self._reserved: dict[str, StepReservation] = {}

    def reserve(self, calls: Sequence[ToolCall]) -> None:
        """Draw one step number per call, in the given order."""
        for call in calls:
            self._reserved[call.id] = DBOS.reserve_step()

    def take(self, call_id: str) -> StepReservation | None:
        """The reservation of ``call_id`` (once); ``None`` outside a reserved turn."""
        return self._reserved.pop(call_id, None)


class DurableChatClient(BaseChatClient):
    """Runs each model request as a step; reserves the steps of the calls it returns.
    A stream is one step too: its text arrives in one piece."""

    def __init__(self, inner: ChatClient, book: StepBook) -> None:
        self.inner = inner
        self.book = book

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        async def request() -> codec.JSON:
            try:
                response = await self.inner.complete(messages, tools, options)
            except (InvalidHistoryError, asyncio.CancelledError):
                raise
            except Exception as exc:
                return codec.model_error_to_json(exc)
            return {"response": response_to_dict(response)}

        logged = await DBOS.run_step_async({"name": MODEL_STEP}, request)
        response = codec.model_outcome_from_json(logged)
        response = _unique_call_ids(response, messages)
        self.book.reserve(response.message.tool_calls)
        return response


class DurableTool(DelegatingTool):
    """Runs the wrapped tool's ``invoke`` as a step, at the number reserved for its call.

    A :class:`~tether.durable.transaction.TransactionalTool` (wrapped or not) runs as a
    DBOS transactional step instead: its database writes and the step's log entry commit
    in one transaction, so a crash cannot separate them. The wrappers around it then run
    in the workflow itself and must be deterministic (approval and guard wrappers are).
    """

    def __init__(self, inner: Tool, book: StepBook) -> None:
        super().__init__(inner)
        self.book = book
        self._contexts: dict[str, Any] = {}
        self._logs_ruling = _has_own_ruling(inner)

    async def ruling(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> Ruling:
        """The inner tool's ruling; logged as a step when the tool has a ruling of its own
        (with the approval context, which the run reads right after an ``ask``)."""
        if not self._logs_ruling:
            return await self.inner.ruling(arguments, ctx)

        async def decide() -> codec.JSON:
            try:
                ruling = await self.inner.ruling(arguments, ctx)
            except Exception as exc:  # as the invoker does: failing closed
                why = f"the policy could not decide ({type(exc).__name__})"
                return {"ruling": Ruling("deny", why, "error").to_dict(), "context": None}
            context = None
            if ruling.action == "ask":
                try:
                    context = self.inner.approval_context(arguments, ctx)
                except Exception as exc:
                    context = {"error": f"approval context unavailable: {type(exc).__name__}"}
            return {"ruling": ruling.to_dict(), "context": context}

        logged = await DBOS.run_step_async({"name": RULING_STEP + self.name}, decide)
        if ctx.call is not None:
            self._contexts[ctx.call.id] = logged["context"]
        return Ruling.from_dict(logged["ruling"])

    def approval_context(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> Any:
        if ctx.call is not None and ctx.call.id in self._contexts:
            return self._contexts.pop(ctx.call.id)
        return self.inner.approval_context(arguments, ctx)

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        reservation = self.book.take(ctx.call.id) if ctx.call is not None else None
        name = TOOL_STEP + self.name
        if _is_transactional(self.inner):
            # The wrappers around the transactional tool run in the workflow; the
            # transactional tool itself takes the reservation and becomes the step.
            token = RESERVED_STEP.set((reservation, name))
            try:
                return await self.inner.invoke(arguments, ctx)
            finally:
                RESERVED_STEP.reset(token)

        async def call() -> codec.JSON:
            try:
                return {"text": await self.inner.invoke(arguments, ctx)}
            except Exception as exc:
                return codec.tool_error_to_json(exc)

        if reservation is None:
            logged = await DBOS.run_step_async({"name": name}, call)
        else:
            logged = await reservation.run_async({"name": name}, call)
        return codec.tool_outcome_from_json(logged)


def _has_own_ruling(tool: Tool) -> bool:
    """Whether ``tool`` or a tool it wraps overrides ``Tool.ruling`` (beyond forwarding)."""
    while True:
        if type(tool).ruling not in (Tool.ruling, DelegatingTool.ruling):
            return True
        if not isinstance(tool, DelegatingTool):
            return False
        tool = tool.inner


def _is_transactional(tool: Tool) -> bool:
    while True:
        if isinstance(tool, TransactionalTool):
            return True
        if not isinstance(tool, DelegatingTool):
            return False
        tool = tool.inner


def _unique_call_ids(response: ChatResponse, history: Sequence[Message]) -> ChatResponse:
    """Give every call without an id, or with an id already used in the run, a fresh one
    (deterministic: the same history and reply give the same ids)."""
    used = {c.id for m in history for c in m.tool_calls}
    if not any(not c.id or c.id in used for c in response.message.tool_calls):
        return response
    messages = []
    n = len(used)
    for m in response.messages:
        parts = []
        for p in m.parts:
            if isinstance(p, ToolCall):
                if not p.id or p.id in used:
                    n += 1
                    while f"call_{n}" in used:
                        n += 1
                    p = replace(p, id=f"call_{n}")
                used.add(p.id)
            parts.append(p)
        messages.append(Message(m.role, tuple(parts), m.metadata))
    return replace(response, messages=tuple(messages))
