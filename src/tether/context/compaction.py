"""Compaction: older turns replaced by a summary the model writes.

:class:`CompactHistory` wraps any client. When a request's estimate passes
``trigger_tokens`` — or when the inner client raises
:class:`~tether.errors.ContextWindowExceeded`, in which case it compacts and retries once —
it asks a summariser (one request) to summarise the older turns, and forwards::

    [first user message + summary] + newest turns, verbatim

The cut is always made before an assistant message (or a user message), so a call is never
separated from its results; the newest turns kept verbatim are about
``keep_recent_tokens``. The summary is state: the next requests reuse it (a stable prefix)
until the next compaction, which summarises the previous summary and the turns since.

The summariser's usage is added to the usage of the response the wrapper returns, so the
run's totals and budgets count it. ``server_side=True`` asks Anthropic to compact on the
server instead (see :mod:`tether.context.anthropic_server` for what that needs).
"""

from __future__ import annotations

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
from tether.context import anthropic_server
from tether.context.clearing import request_extra_chars
from tether.errors import ContextWindowExceeded
from tether.history import ensure_valid
from tether.invoke import cap_text
from tether.messages import Message, Text, ToolCall, ToolResult, Usage
from tether.tokens import estimate_message, estimate_tokens
from tether.tools import ToolSpec

__all__ = ["SUMMARY_HEADER", "SUMMARY_INSTRUCTIONS", "CompactHistory", "Compaction", "render"]

SUMMARY_HEADER = "[Summary of the earlier part of this conversation, written to free context]"
SUMMARY_INSTRUCTIONS = (
    "You summarise the earlier part of an agent's work so that it can go on without it. "
    "Keep the facts it found (identifiers, numbers, names, error codes, file names, line "
    "numbers), the decisions made, what was tried and failed, how far it got, and what "
    "remains to do. Drop what no longer matters. Write plain, dense text."
)


@dataclass(frozen=True, slots=True)
class Compaction:
    """One compaction: when, why, how many messages it replaced, what it cost."""

    request: int
    reason: str  # "threshold" | "overflow"
    messages: int
    tokens_before: int
    tokens_after: int
    usage: Usage


class CompactHistory(DelegatingChatClient):
    """Replaces older turns by a summary once a request passes ``trigger_tokens``, or
    when the inner client reports a context overflow (then retries once).

    ``summarizer`` writes the summary (default: the inner client); ``keep_recent_tokens``
    (default: a quarter of the trigger) is about how much of the newest history stays
    verbatim; ``keep_first`` keeps the first user message (the task) verbatim too.
    """

    def __init__(
        self,
        inner: ChatClient,
        *,
        summarizer: ChatClient | None = None,
        trigger_tokens: int = 80_000,
        keep_recent_tokens: int | None = None,
        keep_first: bool = True,
        instructions: str = SUMMARY_INSTRUCTIONS,
        max_summary_tokens: int = 2_000,
        max_result_chars: int = 4_000,
        server_side: bool = False,
    ) -> None:
        super().__init__(inner)
        if trigger_tokens < 1:
            raise ValueError("trigger_tokens must be at least 1")
        self.summarizer = summarizer or inner
        self.trigger_tokens = trigger_tokens
        self.keep_recent_tokens = (
            trigger_tokens // 4 if keep_recent_tokens is None else keep_recent_tokens
        )
        self.keep_first = keep_first
        self.instructions = instructions
        self.max_summary_tokens = max_summary_tokens
        self.max_result_chars = max_result_chars
        self.server_side = server_side
        self.compactions: list[Compaction] = []
        self.summary: str | None = None
        self.requests = 0
        self._covered = 0
        self._anchor: Message | None = None
        self._unreported = Usage()
        if server_side:
            anthropic_server.require_server_side(
                inner, anthropic_server.COMPACTION_BETA, compaction=True
            )

    # --- the seam -------------------------------------------------------------------------

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        edited, sent = await self.prepare(messages, tools, options)
        try:
            response = await self.inner.complete(edited, tools, sent)
        except ContextWindowExceeded:
            if self.server_side:
                raise
            edited = await self._overflowed(messages, tools, options)
            response = await self.inner.complete(edited, tools, sent)
        else:
            if response.stop_reason.context_exceeded and not self.server_side:
                response = await self._retry_after_stop(messages, tools, options, response)
        return self._report(response)

    async def _retry_after_stop(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        options: ChatOptions,
        response: ChatResponse,
    ) -> ChatResponse:
        """The reply stopped on a full window: compact and ask once more (its usage is
        still billed); with nothing left to compact, the reply stands."""
        edited = await self.compact(messages, tools, options, "overflow")
        if edited is None:
            return response
        self._unreported = self._unreported + response.usage
        return await self.inner.complete(edited, tools, options)

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        edited, sent = await self.prepare(messages, tools, options)
        started = False
        try:
            async for chunk in self.inner.stream(edited, tools, sent):
                started = True
                yield self._report_chunk(chunk)
            return
        except ContextWindowExceeded:
            if started or self.server_side:
                raise
        edited = await self._overflowed(messages, tools, options)
        async for chunk in self.inner.stream(edited, tools, sent):
            yield self._report_chunk(chunk)

    # --- the policy -----------------------------------------------------------------------

    async def prepare(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> tuple[list[Message], ChatOptions]:
        """The request to forward, compacting first if it is over the trigger."""
        self.requests += 1
        if self.server_side:
            edit = anthropic_server.compact_edit(
                trigger_tokens=self.trigger_tokens, instructions=self.instructions
            )
            return list(messages), anthropic_server.with_edit(options, edit)
        self._forget_if_rewritten(messages)
        edited = self.build(messages)
        tokens = estimate_tokens(edited, request_extra_chars(tools, options))
        if tokens > self.trigger_tokens:
            compacted = await self.compact(messages, tools, options, "threshold")
            if compacted is not None:
                edited = compacted
        return edited, options

    async def compact(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSpec],
        options: ChatOptions,
        reason: str,
    ) -> list[Message] | None:
        """Summarise up to the newest turns; the new request, or ``None`` if there is
        nothing new to summarise."""
        cut = self._cut(messages)
        if cut is None:
            return None
        extra = request_extra_chars(tools, options)
        before = estimate_tokens(self.build(messages), extra)
        request = render(
            messages[0] if self.keep_first else None,
            self.summary,
            messages[self._start() : cut],
            self.max_result_chars,
        )
        response = await self.summarizer.complete(
            [Message.user(request)],
            (),
            ChatOptions(self.instructions, self.max_summary_tokens),
        )
        self._unreported = self._unreported + response.usage
        text = response.message.text.strip() or "(the summariser returned nothing)"
        self.summary = text
        self._covered = cut
        self._anchor = messages[cut - 1]
        edited = self.build(messages)
        after = estimate_tokens(edited, extra)
        self.compactions.append(
            Compaction(self.requests, reason, cut, before, after, response.usage)
        )
        return edited

    def build(self, messages: Sequence[Message]) -> list[Message]:
        """``messages`` with the covered turns replaced by the current summary."""
        if self.summary is None:
            return list(messages)
        block = Text(f"{SUMMARY_HEADER}\n{self.summary}")
        head_parts: tuple[Text | ToolCall | ToolResult, ...] = (block,)
        if self.keep_first:
            head_parts = (*messages[0].parts, block)
        tail = list(messages[self._covered :])
        if tail and tail[0].role == "user":
            head_parts = (*head_parts, *tail.pop(0).parts)
        edited = [Message("user", head_parts), *tail]
        ensure_valid(edited)
        return edited

    # --- helpers --------------------------------------------------------------------------

    def _cut(self, messages: Sequence[Message]) -> int | None:
        """Where the verbatim tail starts: before an assistant or user message, after the
        part already summarised, keeping about ``keep_recent_tokens`` of the newest."""
        first = self._start() + 1
        valid = [c for c in range(first, len(messages)) if messages[c].role != "tool"]
        if not valid:
            return None
        tail = 0
        sizes: dict[int, int] = {}
        for i in range(len(messages) - 1, valid[0] - 1, -1):
            tail += estimate_message(messages[i])
            sizes[i] = tail
        fitting = [c for c in valid if sizes[c] <= self.keep_recent_tokens]
        return fitting[0] if fitting else valid[-1]

    def _start(self) -> int:
        """The first message not yet summarised (the task stays out when kept)."""
        return max(self._covered, 1 if self.keep_first else 0)

    def _forget_if_rewritten(self, messages: Sequence[Message]) -> None:
        if self.summary is None:
            return
        n = self._covered
        anchor = self._anchor
        if len(messages) < n or (
            messages[n - 1] is not anchor and _key(messages[n - 1]) != _key(anchor)
        ):
            self.summary, self._covered, self._anchor = None, 0, None

    async def _overflowed(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> list[Message]:
        edited = await self.compact(messages, tools, options, "overflow")
        if edited is None:
            raise ContextWindowExceeded(
                "the request exceeds the context window and there are no older turns "
                "left to compact; lower keep_recent_tokens or cap tool results"
            )
        return edited

    def _report(self, response: ChatResponse) -> ChatResponse:
        if self._unreported == Usage():
            return response
        usage, self._unreported = response.usage + self._unreported, Usage()
        return replace(response, usage=usage)

    def _report_chunk(self, chunk: StreamChunk) -> StreamChunk:
        if isinstance(chunk, ResponseDone):
            return ResponseDone(self._report(chunk.response))
        return chunk


def _key(message: Message | None) -> tuple[object, ...]:
    """What identifies a message across requests: role, text and call ids (a result
    cleared to a stub by an outer wrapper is still the same message)."""
    if message is None:
        return ()
    ids = tuple(c.id for c in message.tool_calls) + tuple(r.call_id for r in message.tool_results)
    return (message.role, message.text, ids)


def render(
    first: Message | None,
    summary: str | None,
    messages: Sequence[Message],
    max_result_chars: int,
) -> str:
    """The summariser's input: the task, the previous summary, the turns to summarise."""
    lines: list[str] = []
    if first is not None:
        lines += ["# The task (kept verbatim; do not repeat it)", first.text, ""]
    if summary:
        lines += ["# Summary so far", summary, ""]
    lines.append("# Turns to summarise")
    for m in messages:
        for p in m.parts:
            if isinstance(p, Text):
                lines.append(f"[{m.role}] {p.text}")
            elif isinstance(p, ToolCall):
                lines.append(f"[call {p.id}] {p.name} {p.arguments_json()}")
            else:
                flag = " (error)" if p.is_error else ""
                content = cap_text(p.content, max_result_chars)
                lines.append(f"[result of {p.call_id}{flag}] {content}")
    lines += ["", "Write the new summary (it replaces the summary so far)."]
    return "\n".join(lines)
