"""Steering a small embedded model through the refund agent's steps, by what it is shown.

The embedded model (SmolLM2-135M) decoding greedily under the reply grammar copies what it
has just seen: offered every tool on every turn, it calls ``read_ticket`` again and again
until the run's turn limit, and never reaches a proposal. :class:`OfferUnanswered` sends
each request with only the tools that have not answered yet: a read tool that returned is
not offered again, ``propose_refund`` stays offered until a proposal ran or a person
refused it (a refusal in code, such as an amount above what remains, leaves it offered so
the model can correct itself), and once every tool has answered the model can only write
its reply: asked as ``{"answer": "..."}`` under the grammar (at most :data:`MAX_REPLY`
characters), and handed back as plain text, since in free text the model imitates the
JSON calls of its history instead of answering. A sentence the model repeats is kept once
(:func:`tether_desk.draft_quality.tidy`): greedy decoding loops on the last fact it read.

It narrows what the model is shown, nothing else: the agent keeps its whole tool list, and
every rule applies to whatever is called (the tool's own validation, the desk's ruling on
the amount, the person's approval, the ledger's cumulative rule).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

from tether.clients import (
    ChatOptions,
    ChatResponse,
    DelegatingChatClient,
    ResponseDone,
    StreamChunk,
    TextDelta,
)
from tether.constrained import JSON_SCHEMA
from tether.messages import Message, Text
from tether.tools import ToolSpec
from tether_desk.draft_quality import tidy

ANSWERED = frozenset({"ok", "denied"})
"""Result statuses after which a tool is not offered again: it returned, or a person
refused it."""
MAX_REPLY = 800
"""Longest reply draft asked of the small model, in characters."""
REPLY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "minLength": 1, "maxLength": MAX_REPLY}},
    "required": ["answer"],
    "additionalProperties": False,
}


def unanswered(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[ToolSpec]:
    """The tools without an answered call in ``messages``."""
    names = {c.id: c.name for m in messages for c in m.tool_calls}
    done = {names.get(r.call_id) for m in messages for r in m.tool_results if r.status in ANSWERED}
    return [t for t in tools if t.name not in done]


class OfferUnanswered(DelegatingChatClient):
    """Offers the model only the tools that have not answered yet (see the module doc)."""

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        offered = unanswered(messages, tools)
        if offered or not tools:
            return await self.inner.complete(messages, offered, options)
        extra = {**options.extra, JSON_SCHEMA: REPLY_SCHEMA}
        response = await self.inner.complete(messages, (), replace(options, extra=extra))
        return replace(response, messages=(_unwrapped(response.message),))

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        offered = unanswered(messages, tools)
        if offered or not tools:
            async for chunk in self.inner.stream(messages, offered, options):
                yield chunk
            return
        response = await self.complete(messages, tools, options)
        if response.message.text:
            yield TextDelta(response.message.text)
        yield ResponseDone(response)


def _unwrapped(message: Message) -> Message:
    """The reply's answer as plain text (a reply cut short stays as it came: the stop
    reason says it was cut, and the loop reports it truncated)."""
    try:
        value = json.loads(message.text)
    except json.JSONDecodeError:
        return message
    if not isinstance(value, dict) or not isinstance(value.get("answer"), str):
        return message
    return Message("assistant", (Text(tidy(value["answer"])),), message.metadata)
