"""What recording and replaying share."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tether.clients import ChatClient
from tether.errors import ToolFailure
from tether.messages import ToolCall, message_to_dict
from tether.replay.cassette import Cassette, Redactor
from tether.tools import RunContext, Tool

if TYPE_CHECKING:
    from tether.loop import Agent


def outcome_dict(result: Any) -> dict[str, Any]:
    """How a run or a workflow ended, as JSON (with the transcript when there is one)."""
    outcome = result.outcome
    data: dict[str, Any] = {"kind": outcome.kind, "reason": outcome.reason}
    transcript = getattr(result, "transcript", None)
    if transcript is not None:
        data["transcript"] = [message_to_dict(m) for m in transcript]
    return data


class Tape:
    """What recording and replaying share: the redactor and the turn count."""

    def __init__(self, cassette: Cassette, secrets: Iterable[str], environ: Any) -> None:
        self.cassette = cassette
        self.redactor = Redactor(secrets, environ=environ)
        self.turn = 0

    def instrument(self, agent: Agent[Any]) -> Agent[Any]:
        """Put this tape around ``agent``'s client and tools, in place; returns the agent."""
        self.cassette.meta.setdefault("kind", "agent")
        agent.client = self.client(agent.client)
        agent.tools = {t.name: t for t in self.tools(agent.tools.values())}
        return agent

    def client(self, inner: ChatClient) -> ChatClient:  # pragma: no cover - overridden
        raise NotImplementedError

    def tools(self, tools: Iterable[Tool]) -> list[Tool]:  # pragma: no cover - overridden
        raise NotImplementedError


def call_of(tool: Tool, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> ToolCall:
    """The call a tool is running (its id from the run context)."""
    call_id = ctx.call.id if ctx.call is not None else ""
    return ToolCall(call_id, tool.name, dict(arguments))


def raised(exc: Exception) -> dict[str, Any]:
    """What a tool raised, as recorded: a ToolFailure's message, or the error's type."""
    if isinstance(exc, ToolFailure):
        return {"raised": "ToolFailure", "message": str(exc)}
    return {"raised": "error", "error_type": type(exc).__name__, "message": str(exc)}
