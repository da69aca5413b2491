"""The one seam to a model: :class:`ChatClient`, with two methods, ``complete`` and ``stream``.

Providers, test doubles and wrappers all implement this seam and nothing else. A concern
that keeps the contract (logging, tracing, context reduction, constrained decoding) is a
:class:`DelegatingChatClient` overriding one method. Wrappers compose with
:class:`ClientPipeline`, written outermost first::

    client = ClientPipeline(provider).use(Tracing).use(ClearOldResults, keep=3).build()
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, runtime_checkable

from tether.errors import ConfigError
from tether.messages import Message, StopReason, Usage
from tether.tools import ToolSpec

_EMPTY: Mapping[str, Any] = {}

ToolChoice: TypeAlias = str
"""Which calls the model may make: ``"auto"`` (it decides), ``"required"`` (at least one
call), ``"none"`` (no call, an answer in text), or the name of one of the request's tools
(a call to that tool)."""
TOOL_CHOICE_MODES = ("auto", "required", "none")


@dataclass(frozen=True, slots=True)
class OutputSchema:
    """A structured reply: the reply's text must be one JSON object valid against ``schema``.

    Plain data read by each adapter, which asks for it with the provider's own mechanism
    (see ``docs/workflows.md``). Build one from a Python type with
    :func:`tether.structured.output_schema`; the root is always an object.
    """

    name: str
    """A short name for the format (letters, digits, ``_`` and ``-``), sent where the
    provider asks for one."""
    schema: Mapping[str, Any]
    """The JSON schema, as written by pydantic; each adapter makes it strict in its way."""
    description: str | None = None
    """What the object is, sent where the provider takes a description."""


@dataclass(frozen=True, slots=True)
class ChatOptions:
    """Per-request settings. ``extra`` carries provider-specific settings untouched."""

    instructions: str | None = None
    """System instructions; sent apart from the history."""
    max_output_tokens: int | None = None
    """Ceiling on the reply's tokens; hitting it truncates the reply."""
    temperature: float | None = None
    """Sampling temperature; ``None`` leaves the provider's default."""
    model: str | None = None
    """Overrides the client's model for this request."""
    extra: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Provider-specific settings, passed through."""
    output_schema: OutputSchema | None = None
    """Ask for a structured reply: one JSON object valid against this schema, as text.
    Validating it is the caller's job (:func:`tether.structured.extract` does it)."""
    tool_choice: ToolChoice | None = None
    """Which calls the model may make (see :data:`ToolChoice`); ``None`` is the provider's
    default, which is ``"auto"`` whenever tools are sent."""


def tool_choice_of(options: ChatOptions, tools: Sequence[ToolSpec]) -> ToolChoice | None:
    """The request's tool choice, checked against its tools; ``None`` when there is
    nothing to send (no choice, or no tools and a choice that needs none).

    Raises :class:`~tether.errors.ConfigError` for a choice no request could honour: a call
    required, or a named tool, with no such tool in the request.
    """
    choice = options.tool_choice
    if choice is None:
        return None
    if not isinstance(choice, str) or not choice:
        raise ConfigError(
            f"tool_choice must be 'auto', 'required', 'none' or a tool's name, not {choice!r}"
        )
    names = [t.name for t in tools]
    if choice in ("auto", "none"):
        return choice if tools else None
    if not tools:
        raise ConfigError(f"tool_choice {choice!r} needs at least one tool in the request")
    if choice != "required" and choice not in names:
        known = ", ".join(names)
        raise ConfigError(
            f"tool_choice names {choice!r}, which is not a tool of the request "
            f"({known}); use one of them, 'auto', 'required' or 'none'"
        )
    return choice


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """A provider's reply: new assistant message(s), why it stopped, what it cost."""

    messages: tuple[Message, ...]
    stop_reason: StopReason
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    raw: Any = None

    @property
    def message(self) -> Message:
        """The reply as one assistant message (parts of all messages, in order)."""
        if len(self.messages) == 1:
            return self.messages[0]
        parts = tuple(p for m in self.messages for p in m.parts)
        return Message("assistant", parts)


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of streamed text."""

    text: str


@dataclass(frozen=True, slots=True)
class ResponseDone:
    """The end of a stream: the full response."""

    response: ChatResponse


StreamChunk: TypeAlias = TextDelta | ResponseDone


@runtime_checkable
class ChatClient(Protocol):
    """Anything that answers a history with a response."""

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        """Send one request and return the whole response."""
        ...

    def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        """Send one request; yield text deltas, then exactly one :class:`ResponseDone`."""
        ...


class BaseChatClient:
    """Base for clients that implement ``complete``; ``stream`` yields the whole text
    as one delta, then the response."""

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        raise NotImplementedError

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        response = await self.complete(messages, tools, options)
        text = response.message.text
        if text:
            yield TextDelta(text)
        yield ResponseDone(response)


class DelegatingChatClient:
    """Forwards both methods to ``inner``; subclasses override the one they change."""

    def __init__(self, inner: ChatClient) -> None:
        self.inner = inner

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        return await self.inner.complete(messages, tools, options)

    def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        return self.inner.stream(messages, tools, options)


class ClientPipeline:
    """Builds a stack of wrappers around a client, outermost first (``.use`` order)."""

    def __init__(self, inner: ChatClient) -> None:
        self._inner = inner
        self._layers: list[Callable[[ChatClient], ChatClient]] = []

    def use(self, wrapper: Callable[..., ChatClient], /, **kwargs: Any) -> ClientPipeline:
        """Add a wrapper: ``wrapper(inner, **kwargs)`` must return a client."""
        self._layers.append(lambda inner: wrapper(inner, **kwargs))
        return self

    def build(self) -> ChatClient:
        """The composed client: the first ``use`` sees requests first."""
        client = self._inner
        for layer in reversed(self._layers):
            client = layer(client)
        return client
