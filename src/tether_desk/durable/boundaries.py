"""The step boundaries of the durable ticket flow, as hooks a crash test can stop at.

A :class:`~tether_desk.durable.DurableDesk` built with a ``boundary`` hook awaits it at
each of these points (``None``, the default, costs nothing). Inside a step, before its
work (``X.before``) and after it, before DBOS logs the step (``X.returned``):

* ``triage``: the ticket claimed (``new -> triaging``), the triage model call, its
  category and trace written (one step);
* ``model.before:N`` / ``model.returned:N``: the refund agent's model call of turn N;
* ``tool.before:N:NAME`` / ``tool.returned:N:NAME``: a tool call (``propose_refund``
  commits the refund in the ledger);
* ``screen.before``: the desk's screening of a proposal;
* ``approval.requested`` / ``approval.returned``: before and after the approval row,
  the run's state, the ticket's status and the trace are stored (one transaction), inside
  the step that screened the proposal;
* ``draft``: the draft and the ticket's status written; ``answer``, ``needs_human``,
  ``failed``: the other endings.

And between steps: ``ticket.done`` (the ticket's last step is logged, its workflow has
not returned; for a refund, the approval is stored and nothing waits for it),
``approval.received`` (the decision's workflow started, the run not yet resumed) and
``finish.done`` (its last step logged). "After step X is logged" is the next step's
``before``: nothing durable happens between.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from tether.clients import ChatClient, ChatOptions, ChatResponse, DelegatingChatClient
from tether.messages import Message
from tether.tools import DelegatingTool, RunContext, Tool, ToolSpec

Boundary = Callable[[str, int], Awaitable[None]]
"""Awaited with a boundary's name and the ticket's id (a test decides whether to stop)."""

At = Callable[[str], Awaitable[None]]


class BoundaryClient(DelegatingChatClient):
    """Reaches ``model.before:N`` and ``model.returned:N`` around each request."""

    def __init__(self, inner: ChatClient, at: At) -> None:
        super().__init__(inner)
        self.at = at

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        turn = 1 + sum(1 for m in messages if m.role == "assistant")
        await self.at(f"model.before:{turn}")
        response = await self.inner.complete(messages, tools, options)
        await self.at(f"model.returned:{turn}")
        return response


class BoundaryTool(DelegatingTool):
    """Reaches ``tool.before:N:NAME`` and ``tool.returned:N:NAME`` around each call."""

    def __init__(self, inner: Tool, at: At) -> None:
        super().__init__(inner)
        self.at = at

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        await self.at(f"tool.before:{ctx.turn}:{self.name}")
        text = await self.inner.invoke(arguments, ctx)
        await self.at(f"tool.returned:{ctx.turn}:{self.name}")
        return text
