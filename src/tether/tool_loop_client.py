"""The loop as a :class:`~tether.clients.ChatClient` wrapper (the
``FunctionInvokingChatClient`` form).

It runs tool calls itself and returns every message the loop produced. Unlike a wrapper
that forces a tool-less answer at its cap, it raises :class:`~tether.errors.RunNotCompleted`
(with the full :class:`~tether.outcomes.RunResult`) when the loop ends without an answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tether.clients import ChatClient, ChatOptions, ChatResponse, DelegatingChatClient
from tether.errors import RunNotCompleted
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message, StopReason
from tether.tools import Tool, ToolSpec


class ToolLoopChatClient(DelegatingChatClient):
    """Answers a request by running the bounded loop with ``tools`` over ``inner``."""

    def __init__(
        self, inner: ChatClient, tools: Iterable[Tool], *, limits: Limits | None = None
    ) -> None:
        super().__init__(inner)
        self.tools = list(tools)
        self.limits = limits or Limits()

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        """Run the loop; ``tools`` given here are ignored (the wrapper owns its tools)."""
        agent: Agent[None] = Agent(self.inner, self.tools, limits=self.limits, options=options)
        result = await agent.run(messages)
        if not result.outcome.completed:
            raise RunNotCompleted(result)
        new = result.transcript[len(messages) :]
        return ChatResponse(new, StopReason("end_turn", "end_turn"), result.usage)
