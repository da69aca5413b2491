"""A bounded cache of converted messages, so a growing history is converted once.

Each turn resends the whole history; converting every old message again would make a run
quadratic in conversion work. :class:`WireCache` keeps the wire form of each
:class:`~tether.messages.Message` keyed by ``id(message)``. An entry holds a strong
reference to its message, so the id cannot be reused by another object while the entry
lives, and a lookup also checks identity (``is``). The least recently used entries are
dropped beyond ``maxsize``. Messages are frozen, so a cached wire form never goes stale;
callers must treat the returned wire value as read-only (copy before decorating it).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

from tether.messages import Message

W = TypeVar("W")


class WireCache(Generic[W]):
    """An LRU map from message identity to its converted wire form."""

    def __init__(self, convert: Callable[[Message], W], maxsize: int = 4096) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self._convert = convert
        self._maxsize = maxsize
        self._entries: OrderedDict[int, tuple[Message, W]] = OrderedDict()
        self.conversions = 0
        """How many times a message was actually converted (cache misses)."""

    def __call__(self, message: Message) -> W:
        """The wire form of ``message``, converted on first sight only."""
        key = id(message)
        entry = self._entries.get(key)
        if entry is not None and entry[0] is message:
            self._entries.move_to_end(key)
            return entry[1]
        wire = self._convert(message)
        self.conversions += 1
        self._entries[key] = (message, wire)
        self._entries.move_to_end(key)
        if len(self._entries) > self._maxsize:
            self._entries.popitem(last=False)
        return wire

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()
