"""Clearing old tool results: rarely, and a lot.

:class:`ClearOldResults` wraps any client. When a request's estimated size passes
``trigger_tokens``, it replaces the oldest tool results (all but the newest ``keep``) by a
short stub *under the same call id*, until the estimate falls to ``target_tokens``. The
call stays, its result stays, the history stays valid; only the content shrinks.

Every edit of the start of a history invalidates the provider's prompt cache from that
point, so the set of cleared call ids is state: between two clearings every request
carries exactly the same stubbed prefix, byte for byte, and only the end grows. The
loop's own transcript is never modified; the wrapper edits each request it forwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from tether.clients import (
    ChatClient,
    ChatOptions,
    ChatResponse,
    DelegatingChatClient,
    StreamChunk,
)
from tether.context import anthropic_server
from tether.history import ensure_valid
from tether.messages import Message, ToolResult
from tether.tokens import CHARS_PER_TOKEN, estimate_tokens
from tether.tools import ToolSpec

__all__ = ["STUB", "ClearOldResults", "Clearing", "request_extra_chars"]

STUB = "[Result cleared to free context. Call the tool again if you need it.]"


@dataclass(frozen=True, slots=True)
class Clearing:
    """One clearing: when, how many results, and the estimate before and after."""

    request: int
    cleared: int
    tokens_before: int
    tokens_after: int


def request_extra_chars(tools: Sequence[ToolSpec], options: ChatOptions) -> int:
    """Characters a request carries besides its messages (instructions, tool specs)."""
    chars = len(options.instructions or "")
    for t in tools:
        chars += len(t.name) + len(t.description) + len(str(t.parameters))
    return chars


def stubbed(
    messages: Sequence[Message], cleared: set[str] | frozenset[str], stub: str
) -> list[Message]:
    """``messages`` with the result of every call id in ``cleared`` replaced by ``stub``."""
    if not cleared:
        return list(messages)
    out: list[Message] = []
    for m in messages:
        if m.role == "tool" and any(
            isinstance(p, ToolResult) and p.call_id in cleared for p in m.parts
        ):
            parts = tuple(
                ToolResult(p.call_id, stub, p.is_error)
                if isinstance(p, ToolResult) and p.call_id in cleared
                else p
                for p in m.parts
            )
            m = Message("tool", parts, m.metadata)
        out.append(m)
    return out


class ClearOldResults(DelegatingChatClient):
    """Replaces all but the newest ``keep`` tool results by a stub once a request passes
    ``trigger_tokens``, clearing down to ``target_tokens`` in one go (default: half the
    trigger).

    ``exclude_tools`` names tools whose results are never cleared. ``server_side=True``
    asks Anthropic's context editing to do the same on the server instead (the inner client
    must be the Anthropic adapter with the beta header; see
    :mod:`tether.context.anthropic_server`). ``clearings`` records each clearing.
    """

    def __init__(
        self,
        inner: ChatClient,
        *,
        keep: int = 3,
        trigger_tokens: int = 50_000,
        target_tokens: int | None = None,
        stub: str = STUB,
        exclude_tools: tuple[str, ...] = (),
        server_side: bool = False,
    ) -> None:
        super().__init__(inner)
        target = trigger_tokens // 2 if target_tokens is None else target_tokens
        if keep < 0 or trigger_tokens < 1 or not 0 <= target < trigger_tokens:
            raise ValueError("ClearOldResults needs keep >= 0 and 0 <= target < trigger")
        self.keep = keep
        self.trigger_tokens = trigger_tokens
        self.target_tokens = target
        self.stub = stub
        self.exclude_tools = frozenset(exclude_tools)
        self.server_side = server_side
        self.cleared: set[str] = set()
        self.clearings: list[Clearing] = []
        self.requests = 0
        if server_side:
            anthropic_server.require_server_side(inner, anthropic_server.CONTEXT_EDITING_BETA)

    # --- the seam -------------------------------------------------------------------------

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        edited, options = self.prepare(messages, tools, options)
        return await self.inner.complete(edited, tools, options)

    def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        edited, options = self.prepare(messages, tools, options)
        return self.inner.stream(edited, tools, options)

    # --- the policy -----------------------------------------------------------------------

    def prepare(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> tuple[list[Message], ChatOptions]:
        """The request to forward: stubs applied (and more cleared if over the trigger)."""
        self.requests += 1
        if self.server_side:
            edit = anthropic_server.clear_tool_uses_edit(
                trigger_tokens=self.trigger_tokens,
                keep=self.keep,
                clear_at_least=self.trigger_tokens - self.target_tokens,
                exclude_tools=tuple(sorted(self.exclude_tools)),
            )
            return list(messages), anthropic_server.with_edit(options, edit)
        edited = stubbed(messages, self.cleared, self.stub)
        extra = request_extra_chars(tools, options)
        before = estimate_tokens(edited, extra)
        if before > self.trigger_tokens:
            chosen = self._choose(edited, before - self.target_tokens)
            if chosen:
                self.cleared.update(chosen)
                edited = stubbed(messages, self.cleared, self.stub)
                after = estimate_tokens(edited, extra)
                self.clearings.append(Clearing(self.requests, len(chosen), before, after))
        ensure_valid(edited)
        return edited, options

    def _choose(self, messages: Sequence[Message], need: int) -> list[str]:
        """Oldest clearable call ids whose clearing saves at least ``need`` tokens."""
        names = {c.id: c.name for m in messages if m.role == "assistant" for c in m.tool_calls}
        results = [p for m in messages if m.role == "tool" for p in m.tool_results]
        older = results[: max(0, len(results) - self.keep)]
        chosen: list[str] = []
        saved = 0
        for r in older:
            if saved >= need:
                break
            if r.call_id in self.cleared or names.get(r.call_id) in self.exclude_tools:
                continue
            gain = (len(r.content) - len(self.stub)) // CHARS_PER_TOKEN
            if gain <= 0:
                continue
            chosen.append(r.call_id)
            saved += gain
        return chosen
