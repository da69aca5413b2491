"""A fast local token estimate, used for thresholds before a request is sent.

Providers report the real counts after the fact; this estimate (about four characters a
token, plus a small cost per part) only has to be cheap and monotone. The counter reads
each message once, so estimating a growing history costs the same every turn.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.messages import Message, Text, ToolCall

CHARS_PER_TOKEN = 4
PART_OVERHEAD = 4


def estimate_message(message: Message) -> int:
    """Estimated tokens of one message."""
    chars = 0
    for part in message.parts:
        if isinstance(part, Text):
            chars += len(part.text)
        elif isinstance(part, ToolCall):
            chars += len(part.name) + len(part.arguments_json())
        else:
            chars += len(part.content)
    return chars // CHARS_PER_TOKEN + PART_OVERHEAD * max(1, len(message.parts))


def estimate_tokens(messages: Sequence[Message], extra_chars: int = 0) -> int:
    """Estimated tokens of a whole history (plus ``extra_chars`` of instructions/tools)."""
    return sum(estimate_message(m) for m in messages) + extra_chars // CHARS_PER_TOKEN


class TokenCounter:
    """Estimates a history that grows by appending, reading each message once.

    A history that is not an extension of the previous one is counted again in full.
    """

    __slots__ = ("_last", "_n", "_total")

    def __init__(self) -> None:
        self._n = 0
        self._total = 0
        self._last: Message | None = None

    def count(self, messages: Sequence[Message]) -> int:
        """Estimated tokens of ``messages``."""
        n = self._n
        if n > len(messages) or (n and messages[n - 1] is not self._last):
            n, self._total = 0, 0
        for m in messages[n:]:
            self._total += estimate_message(m)
        self._n = len(messages)
        self._last = messages[-1] if messages else None
        return self._total
