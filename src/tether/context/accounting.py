"""Token accounting: what each request was estimated at, what it cost, what a cache saved.

- :func:`billed_input_tokens` turns usage into a cache-aware bill in input-token units
  (cache reads at a fraction of the price, as providers charge them);
- :class:`UsageLedger` wraps a client and records, per request, the local estimate made
  before sending (:mod:`tether.tokens`) and the usage the provider reported after;
- :class:`PromptCacheSimulator` wraps a client that reports no cache (a scripted model)
  and rewrites each response's usage as a prefix-matching prompt cache would bill it: the
  longest common prefix with the previous request, in tokens, is a cache read.

The run's own totals need nothing from here: the loop sums ``response.usage`` of every
request (cache reads and writes included) into ``RunResult.usage``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, replace

from tether.clients import (
    ChatClient,
    ChatOptions,
    ChatResponse,
    DelegatingChatClient,
    ResponseDone,
    StreamChunk,
)
from tether.context.clearing import request_extra_chars
from tether.messages import Message, Usage, message_to_dict
from tether.tokens import CHARS_PER_TOKEN, estimate_tokens
from tether.tools import ToolSpec

__all__ = [
    "CACHE_READ_PRICE",
    "LedgerEntry",
    "PromptCacheSimulator",
    "UsageLedger",
    "billed_input_tokens",
    "common_prefix_tokens",
]

CACHE_READ_PRICE = 0.1
"""Price of a cached input token relative to an uncached one (Anthropic and OpenAI: 0.1)."""


def billed_input_tokens(
    usage: Usage, *, cache_read: float = CACHE_READ_PRICE, cache_write: float = 1.0
) -> float:
    """Input tokens as billed: uncached at 1, cache reads at ``cache_read``, cache writes
    at ``cache_write`` (1.25 on Anthropic's 5-minute cache; 1 where writes are free)."""
    return (
        usage.input_tokens
        + cache_read * usage.cache_read_tokens
        + cache_write * usage.cache_write_tokens
    )


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One request: its local estimate before sending and the usage reported after."""

    request: int
    messages: int
    estimate: int
    usage: Usage


class UsageLedger(DelegatingChatClient):
    """Records every request's estimate and reported usage in ``entries``."""

    def __init__(self, inner: ChatClient) -> None:
        super().__init__(inner)
        self.entries: list[LedgerEntry] = []

    @property
    def total(self) -> Usage:
        """The usage of all requests so far."""
        total = Usage()
        for e in self.entries:
            total = total + e.usage
        return total

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        estimate = estimate_tokens(messages, request_extra_chars(tools, options))
        response = await self.inner.complete(messages, tools, options)
        self._record(len(messages), estimate, response.usage)
        return response

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        estimate = estimate_tokens(messages, request_extra_chars(tools, options))
        async for chunk in self.inner.stream(messages, tools, options):
            if isinstance(chunk, ResponseDone):
                self._record(len(messages), estimate, chunk.response.usage)
            yield chunk

    def _record(self, n: int, estimate: int, usage: Usage) -> None:
        self.entries.append(LedgerEntry(len(self.entries) + 1, n, estimate, usage))


def _segments(
    messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
) -> list[str]:
    """A request as the ordered texts a provider would see: instructions and tools, then
    one canonical JSON text per message."""
    head = json.dumps(
        [options.instructions or "", [[t.name, t.description, t.parameters] for t in tools]],
        sort_keys=True,
        default=str,
    )
    return [head, *(json.dumps(message_to_dict(m), ensure_ascii=False) for m in messages)]


def common_prefix_tokens(previous: Sequence[str], current: Sequence[str]) -> int:
    """Tokens (characters / 4) of the longest common prefix of two segmented requests."""
    chars = 0
    for a, b in zip(previous, current, strict=False):
        if a == b:
            chars += len(b)
            continue
        n = min(len(a), len(b))
        i = 0
        while i < n and a[i] == b[i]:
            i += 1
        chars += i
        break
    return chars // CHARS_PER_TOKEN


class PromptCacheSimulator(DelegatingChatClient):
    """Bills each response as a prefix-matching prompt cache would.

    A request's tokens are its characters / 4 (instructions, tool specs, messages as
    JSON); the longest common prefix with the previous request becomes
    ``cache_read_tokens``, the rest ``input_tokens``. ``min_prefix_tokens`` mimics the
    providers' minimum cacheable prefix (1,024 tokens on both Anthropic and OpenAI).
    Output tokens are kept from the inner response. For benchmarks and tests only.
    """

    def __init__(self, inner: ChatClient, *, min_prefix_tokens: int = 0) -> None:
        super().__init__(inner)
        self.min_prefix_tokens = min_prefix_tokens
        self._previous: list[str] = []

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        usage = self._bill(messages, tools, options)
        response = await self.inner.complete(messages, tools, options)
        return self._with(response, usage)

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        usage = self._bill(messages, tools, options)
        async for chunk in self.inner.stream(messages, tools, options):
            if isinstance(chunk, ResponseDone):
                chunk = ResponseDone(self._with(chunk.response, usage))
            yield chunk

    def _bill(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> Usage:
        segments = _segments(messages, tools, options)
        total = sum(len(s) for s in segments) // CHARS_PER_TOKEN
        cached = common_prefix_tokens(self._previous, segments)
        if cached < self.min_prefix_tokens:
            cached = 0
        self._previous = segments
        return Usage(input_tokens=total - cached, cache_read_tokens=cached, requests=1)

    @staticmethod
    def _with(response: ChatResponse, usage: Usage) -> ChatResponse:
        return replace(response, usage=replace(usage, output_tokens=response.usage.output_tokens))
