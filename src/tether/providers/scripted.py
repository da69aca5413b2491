"""A scripted model: a list of replies, or a function of the history.

It is both the script and the record: ``client.requests`` keeps what each request carried,
so a test states the conversation once and checks what the loop sent.

Tool calls written without an id get ``call_1``, ``call_2``... in order, so transcripts are
deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

from tether.clients import BaseChatClient, ChatOptions, ChatResponse
from tether.errors import ProviderError
from tether.messages import Message, StopReason, Text, ToolCall, Usage
from tether.tokens import TokenCounter, estimate_tokens
from tether.tools import ToolSpec

Reply: TypeAlias = ChatResponse | str
ScriptFunction: TypeAlias = Callable[[Sequence[Message]], Reply]
CallSpec: TypeAlias = ToolCall | tuple[str, Mapping[str, Any]]


def text_reply(
    text: str, *, stop: str | None = "end_turn", usage: Usage | None = None
) -> ChatResponse:
    """A reply holding only text."""
    return ChatResponse((Message.assistant(text),), StopReason.parse(stop), usage or Usage())


def call_reply(
    *calls: CallSpec,
    text: str | None = None,
    stop: str | None = "tool_use",
    usage: Usage | None = None,
) -> ChatResponse:
    """A reply asking for tool calls: ``("name", {args})`` or :class:`ToolCall` values."""
    parts: list[Text | ToolCall] = [Text(text)] if text else []
    for c in calls:
        parts.append(c if isinstance(c, ToolCall) else ToolCall("", c[0], dict(c[1])))
    return ChatResponse(
        (Message("assistant", tuple(parts)),), StopReason.parse(stop), usage or Usage()
    )


def json_reply(
    value: Any, *, stop: str | None = "end_turn", usage: Usage | None = None
) -> ChatResponse:
    """A structured reply: ``value`` (a pydantic model, dataclass, dict...) as JSON text,
    what a provider sends when asked for an output schema."""
    from pydantic_core import to_json

    return text_reply(to_json(value).decode(), stop=stop, usage=usage)


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """What one request carried."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    options: ChatOptions


class ScriptedClient(BaseChatClient):
    """Answers from a script (list of replies or function of the history).

    ``estimate_usage=True`` fills in usage from the local token estimate when a reply does
    not carry its own. Running past the end of a list raises a ``ProviderError`` that says
    so, never a silent answer.
    """

    def __init__(
        self,
        script: Iterable[Reply] | ScriptFunction,
        *,
        record: bool = True,
        estimate_usage: bool = True,
    ) -> None:
        self._function: ScriptFunction | None = script if callable(script) else None
        self._replies: list[Reply] = [] if callable(script) else list(script)
        self._index = 0
        self._ids = 0
        self._record = record
        self._estimate = estimate_usage
        self._counter = TokenCounter()
        self.requests: list[RecordedRequest] = []

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        if self._record:
            self.requests.append(RecordedRequest(tuple(messages), tuple(tools), options))
        if self._function is not None:
            reply = self._function(messages)
        else:
            if self._index >= len(self._replies):
                raise ProviderError(
                    f"the script has no reply left for request {self._index + 1}",
                    kind="other",
                )
            reply = self._replies[self._index]
            self._index += 1
        response = text_reply(reply) if isinstance(reply, str) else reply
        response = self._with_ids(response)
        if self._estimate and response.usage == Usage():
            response = replace(response, usage=self._usage(messages, response))
        return response

    @property
    def remaining(self) -> int:
        """Replies of a list script not yet used."""
        return len(self._replies) - self._index

    def _with_ids(self, response: ChatResponse) -> ChatResponse:
        parts_of = (p for m in response.messages for p in m.parts)
        if not any(isinstance(p, ToolCall) and not p.id for p in parts_of):
            return response
        messages = []
        for m in response.messages:
            parts = []
            for p in m.parts:
                if isinstance(p, ToolCall) and not p.id:
                    self._ids += 1
                    p = replace(p, id=f"call_{self._ids}")
                parts.append(p)
            messages.append(Message(m.role, tuple(parts), m.metadata))
        return replace(response, messages=tuple(messages))

    def _usage(self, messages: Sequence[Message], response: ChatResponse) -> Usage:
        out = estimate_tokens(response.messages)
        return Usage(input_tokens=self._counter.count(messages), output_tokens=out, requests=1)
