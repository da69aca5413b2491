"""Recording: a run's requests, responses and tool results into a cassette, redacted."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.clients import (
    ChatClient,
    ChatOptions,
    ChatResponse,
    DelegatingChatClient,
    ResponseDone,
    StreamChunk,
)
from tether.errors import ProviderError
from tether.messages import Message, ToolCall
from tether.replay._tape import Tape, call_of, outcome_dict, raised
from tether.replay.cassette import (
    Cassette,
    common_prefix,
    error_to_dict,
    request_record,
    response_to_dict,
)
from tether.tools import DelegatingTool, RunContext, Tool, ToolSpec

if TYPE_CHECKING:
    from tether.loop import Agent


# --- recording ------------------------------------------------------------------------------


class Recorder(Tape):
    """Records requests, responses and tool results into ``cassette``, redacted.

    ``secrets``: values the app marks secret; ``environ`` (default ``os.environ``) supplies
    the keys and tokens to redact by value.
    """

    def __init__(
        self,
        cassette: Cassette | None = None,
        *,
        secrets: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(cassette or Cassette(), secrets, environ)
        self._history: list[dict[str, Any]] = []
        self._tools: list[dict[str, Any]] | None = None
        self._options: dict[str, Any] | None = None

    def client(self, inner: ChatClient) -> ChatClient:
        """``inner`` with every request and response recorded."""
        meta = self.cassette.meta
        meta.setdefault("provider", str(getattr(inner, "provider_name", "") or "unknown"))
        model = getattr(inner, "model", None)
        if isinstance(model, str):
            meta.setdefault("model", model)
        return _RecordingClient(inner, self)

    def tools(self, tools: Iterable[Tool]) -> list[Tool]:
        """Each tool wrapped so that its calls and results are recorded."""
        return [_RecordingTool(t, self) for t in tools]

    def instrument(self, agent: Agent[Any]) -> Agent[Any]:
        limits = agent.limits
        self.cassette.meta["limits"] = {"max_turns": limits.max_turns}
        return super().instrument(agent)

    def tool_step(self, call: ToolCall, result: str, is_error: bool, turn: int) -> None:
        """Record a workflow's tool step."""
        self._tool(call, turn, {"result": result, "is_error": is_error})

    def finish(self, result: Any) -> None:
        """Record how the run ended (a ``RunResult`` or a ``WorkflowResult``)."""
        self.cassette.outcome = self.redactor.value(outcome_dict(result))
        if getattr(result, "transcript", None) is not None:  # an agent's run: replayable
            self.cassette.meta.setdefault("kind", "agent")

    def save(self, path: str | Path) -> Path:
        """Write the cassette, redacted once more as a whole."""
        return self.cassette.save(path, self.redactor)

    def _request(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> int:
        self.turn += 1
        record = request_record(self.redactor, messages, tools, options)
        keep = common_prefix(self._history, record.history)
        entry: dict[str, Any] = {
            "type": "request",
            "turn": self.turn,
            "digest": record.digest,
            "keep": keep,
            "new": record.history[keep:],
        }
        if record.tools != self._tools:
            entry["tools"] = self._tools = record.tools
        if record.options != self._options:
            entry["options"] = self._options = record.options
        self._history = record.history
        self.cassette.interactions.append(entry)
        return self.turn

    def _reply(self, turn: int, response: ChatResponse | None, error: Exception | None) -> None:
        if response is not None:
            data = {"type": "response", "turn": turn, "response": response_to_dict(response)}
        elif isinstance(error, ProviderError):
            data = {"type": "error", "turn": turn, "error": error_to_dict(error)}
        else:
            return
        self.cassette.interactions.append(self.redactor.value(data))

    def _tool(self, call: ToolCall, turn: int, outcome: dict[str, Any]) -> None:
        entry = {
            "type": "tool",
            "turn": turn,
            "call": call.id,
            "name": call.name,
            "arguments": dict(call.arguments),
            **outcome,
        }
        self.cassette.interactions.append(self.redactor.value(entry))


class _RecordingClient(DelegatingChatClient):
    def __init__(self, inner: ChatClient, recorder: Recorder) -> None:
        super().__init__(inner)
        self._recorder = recorder

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        turn = self._recorder._request(messages, tools, options)
        try:
            response = await self.inner.complete(messages, tools, options)
        except ProviderError as exc:
            self._recorder._reply(turn, None, exc)
            raise
        self._recorder._reply(turn, response, None)
        return response

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        turn = self._recorder._request(messages, tools, options)
        try:
            async for chunk in self.inner.stream(messages, tools, options):
                if isinstance(chunk, ResponseDone):
                    self._recorder._reply(turn, chunk.response, None)
                yield chunk
        except ProviderError as exc:
            self._recorder._reply(turn, None, exc)
            raise


class _RecordingTool(DelegatingTool):
    def __init__(self, inner: Tool, recorder: Recorder) -> None:
        super().__init__(inner)
        self._recorder = recorder

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        call = call_of(self, arguments, ctx)
        try:
            text = await self.inner.invoke(arguments, ctx)
        except Exception as exc:
            self._recorder._tool(call, ctx.turn, raised(exc))
            raise
        self._recorder._tool(call, ctx.turn, {"result": text})
        return text
