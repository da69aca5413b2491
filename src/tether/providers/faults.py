"""A client that injects each failure a real provider can produce, on demand.

Wrap any client (usually a :class:`~tether.providers.scripted.ScriptedClient`) and say which
request gets which fault::

    FaultyClient(inner, {2: "truncated_call", 3: "rate_limit"})

or pass a function ``(request_number, messages) -> fault | None``. Faults that replace the
reply (provider errors, pause, refusal) do not consume the inner client's script; the others
distort the inner client's reply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Literal, TypeAlias, get_args

from tether.clients import ChatClient, ChatOptions, ChatResponse, DelegatingChatClient
from tether.errors import ContextWindowExceeded, ProviderError
from tether.messages import Message, StopReason, Text, ToolCall, Usage
from tether.tools import ToolSpec

Fault = Literal[
    "truncated_text",
    "truncated_call",
    "pause_turn",
    "refusal",
    "content_filter",
    "missing_stop",
    "unknown_stop",
    "malformed_arguments",
    "unknown_tool",
    "duplicate_ids",
    "rate_limit",
    "overloaded",
    "server_error",
    "timeout",
    "context_exceeded",
    "context_stop",
]
FAULTS: tuple[Fault, ...] = get_args(Fault)
FaultPlan: TypeAlias = Mapping[int, Fault] | Callable[[int, Sequence[Message]], Fault | None]

_ERRORS: dict[str, ProviderError] = {
    "rate_limit": ProviderError("rate limited (429)", kind="rate_limit", status=429),
    "overloaded": ProviderError("overloaded (529)", kind="overloaded", status=529),
    "server_error": ProviderError("internal server error (500)", kind="server", status=500),
    "timeout": ProviderError("request timed out", kind="timeout"),
}


def _reply(text: str, stop: str) -> ChatResponse:
    return ChatResponse((Message.assistant(text),), StopReason.parse(stop), Usage(requests=1))


class FaultyClient(DelegatingChatClient):
    """Delegates to ``inner`` and injects the planned fault into request N (1-based)."""

    def __init__(self, inner: ChatClient, plan: FaultPlan) -> None:
        super().__init__(inner)
        self._plan = plan
        self.request_count = 0
        self.injected: list[tuple[int, Fault]] = []

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        self.request_count += 1
        n = self.request_count
        fault = self._plan(n, messages) if callable(self._plan) else self._plan.get(n)
        if fault is None:
            return await self.inner.complete(messages, tools, options)
        self.injected.append((n, fault))
        if fault in _ERRORS:
            err = _ERRORS[fault]
            raise ProviderError(str(err), kind=err.kind, status=err.status)
        if fault == "context_exceeded":
            raise ContextWindowExceeded()
        if fault == "pause_turn":
            return _reply("Searching...", "pause_turn")
        if fault == "refusal":
            return _reply("I can't help with that.", "refusal")
        if fault == "content_filter":
            return _reply("[filtered]", "content_filter")
        if fault == "context_stop":
            return _reply("The context", "model_context_window_exceeded")
        response = await self.inner.complete(messages, tools, options)
        return _distort(response, fault, tools)


def _distort(response: ChatResponse, fault: Fault, tools: Sequence[ToolSpec]) -> ChatResponse:
    message = response.message
    calls = message.tool_calls
    if fault == "truncated_text":
        text = message.text or "The answer is"
        return replace(
            response,
            messages=(Message.assistant(text[: max(1, len(text) // 2)]),),
            stop_reason=StopReason.parse("max_tokens"),
        )
    if fault == "missing_stop":
        return replace(response, stop_reason=StopReason.parse(None))
    if fault == "unknown_stop":
        return replace(response, stop_reason=StopReason.parse("something_new"))
    first = calls[0] if calls else ToolCall("", tools[0].name if tools else "any_tool", {})
    texts = [p for p in message.parts if isinstance(p, Text)]
    if fault == "truncated_call":
        raw = first.arguments_json()
        cut = ToolCall(first.id, first.name, {}, raw[: max(1, len(raw) // 2)])
        return _with(response, [*texts, cut], "max_tokens")
    if fault == "malformed_arguments":
        bad = ToolCall(first.id, first.name, {}, "{'not': json,")
        return _with(response, [*texts, bad, *calls[1:]], response.stop_reason.raw)
    if fault == "unknown_tool":
        ghost = ToolCall(first.id, "no_such_tool", dict(first.arguments))
        return _with(response, [*texts, ghost, *calls[1:]], response.stop_reason.raw)
    # duplicate_ids: every call repeats the first call's id
    same = first.id or "call_dup"
    dup = [replace(c, id=same) for c in (calls if len(calls) > 1 else [first, first])]
    return _with(response, [*texts, *dup], response.stop_reason.raw or "tool_use")


def _with(
    response: ChatResponse, parts: Sequence[Text | ToolCall], stop: str | None
) -> ChatResponse:
    return replace(
        response,
        messages=(Message("assistant", tuple(parts)),),
        stop_reason=StopReason.parse(stop),
    )
