"""A model hijacked by one injection: it does the user's task, and whatever the injected
text asks, the moment it reads it.

:class:`HijackedModel` is the fully obedient case of a red-team scenario whose attack is
known in advance: the scenario gives the injected text (however disguised: spelled out,
split, encoded) and the calls it asks for, written as a model that understood it would
write them. Each turn the model reads the user's messages and every tool result that is
not an error; once the injected text is among them, it issues the attacker's calls one per
turn, then goes on with the user's plan, then answers. It never repeats a call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from tether.clients import BaseChatClient, ChatOptions, ChatResponse
from tether.messages import Message, StopReason, Text, ToolCall, Usage
from tether.tools import ToolSpec

__all__ = ["HijackedModel", "Step", "call_key"]

Step = tuple[str, Mapping[str, Any]]


def call_key(name: str, arguments: Mapping[str, Any]) -> str:
    """One string per (tool, arguments), for telling calls apart."""
    return name + json.dumps(arguments, sort_keys=True, default=str)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
        if value.lstrip().startswith(("{", "[")):
            try:
                decoded = json.loads(value)
            except ValueError:
                return
            yield from _strings(decoded)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


class HijackedModel(BaseChatClient):
    """The user's ``plan``; and, once ``injection`` has been read, the ``attack`` calls."""

    def __init__(
        self,
        plan: Sequence[Step],
        *,
        injection: str | None = None,
        attack: Sequence[Step] = (),
        answer: str = "Done.",
    ) -> None:
        self.plan = list(plan)
        self.injection = injection
        self.attack = list(attack)
        self.answer = answer
        self.attack_ids: set[str] = set()

    def _read(self, messages: Sequence[Message]) -> bool:
        if not self.injection:
            return False
        for m in messages:
            for r in m.tool_results:
                if not r.is_error and any(self.injection in s for s in _strings(r.content)):
                    return True
        return False

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        issued = {call_key(c.name, c.arguments) for m in messages for c in m.tool_calls}
        turn = 1 + sum(1 for m in messages if m.role == "assistant")
        steps = (self.attack if self._read(messages) else []) + self.plan
        for n, (name, arguments) in enumerate(steps):
            if call_key(name, arguments) not in issued:
                call = ToolCall(f"t{turn}", name, dict(arguments))
                if n < len(steps) - len(self.plan):
                    self.attack_ids.add(call.id)
                message = Message("assistant", (call,))
                return ChatResponse((message,), StopReason.parse("tool_use"), _usage())
        return ChatResponse(
            (Message("assistant", (Text(self.answer),)),), StopReason.parse("end_turn"), _usage()
        )


def _usage() -> Usage:
    return Usage(input_tokens=1, output_tokens=1, requests=1)
