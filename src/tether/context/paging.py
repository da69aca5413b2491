"""Bounded tool output: return a page, say exactly what was left out and how to get it.

A tool built for an agent filters at the source and caps what it returns. Two helpers:

- :func:`page` takes any iterable (read lazily, never held whole) and returns at most
  ``limit`` items from rank ``since``, followed by a notice such as
  ``[312 more matches: since=50]`` when there are more;
- :class:`CappedTool` wraps any tool and cuts a result longer than ``max_chars`` with the
  same kind of notice, using the core :func:`tether.invoke.cap_text` (the cap that
  ``Limits.max_result_chars`` applies to every result of a run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.invoke import cap_text
from tether.tools import DelegatingTool, RunContext, Tool

__all__ = [
    "DEFAULT_CAP_HINT",
    "DEFAULT_MAX_CHARS",
    "CappedTool",
    "Page",
    "cap_text",
    "cap_tools",
    "page",
]

DEFAULT_MAX_CHARS = 8_000
"""Default cap of :class:`CappedTool`: about 2,000 tokens per result."""

DEFAULT_CAP_HINT = "call again with narrower arguments (a filter, a range, a page) to see the rest"


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a longer sequence: the items shown and how many there were in all."""

    items: tuple[str, ...]
    since: int
    total: int
    unit: str = "items"
    param: str = "since"

    @property
    def remaining(self) -> int:
        """Items after this page."""
        return max(0, self.total - self.since - len(self.items))

    @property
    def next_since(self) -> int | None:
        """The value of ``param`` that returns the next page, or ``None`` at the end."""
        return self.since + len(self.items) if self.remaining else None

    def notice(self) -> str:
        """``[N more <unit>: <param>=<next>]`` when items remain, else an empty string."""
        if not self.remaining:
            return ""
        return f"[{self.remaining} more {self.unit}: {self.param}={self.next_since}]"

    def render(self, *, empty: str = "") -> str:
        """The items one per line, then the notice; ``empty`` when nothing matched at all.

        A ``since`` past the end says how many items there are, so the model can correct.
        """
        if not self.items:
            if self.total == 0:
                return empty
            return (
                f"[no {self.unit} from {self.param}={self.since}: there are {self.total} "
                f"in all; use {self.param}=0 for the first]"
            )
        body = "\n".join(self.items)
        note = self.notice()
        return f"{body}\n{note}" if note else body


def page(
    items: Iterable[str],
    *,
    since: int = 0,
    limit: int = 50,
    unit: str = "items",
    param: str = "since",
) -> Page:
    """Read ``items`` once, keep only ``limit`` of them from rank ``since``, count the rest.

    Memory stays bounded by ``limit`` whatever the length of ``items`` (a generator over a
    2 GB file works).
    """
    if limit < 1:
        raise ValueError("page limit must be at least 1")
    since = max(0, since)
    kept: list[str] = []
    total = 0
    for item in items:
        if since <= total < since + limit:
            kept.append(item)
        total += 1
    return Page(tuple(kept), since, total, unit, param)


class CappedTool(DelegatingTool):
    """A tool whose results longer than ``max_chars`` are cut with a notice.

    The notice says how many characters were left out and ``hint`` says how to get them
    (by default: call again with narrower arguments). Errors raised by the tool pass
    through unchanged; the run-wide ``Limits.max_result_chars`` still applies on top.
    """

    def __init__(
        self, inner: Tool, max_chars: int = DEFAULT_MAX_CHARS, hint: str = DEFAULT_CAP_HINT
    ) -> None:
        super().__init__(inner)
        if max_chars < 1:
            raise ValueError("max_chars must be at least 1")
        self.max_chars = max_chars
        self.hint = hint

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        text = await self.inner.invoke(arguments, ctx)
        return cap_text(text, self.max_chars, self.hint)


def cap_tools(
    tools: Iterable[Tool], max_chars: int = DEFAULT_MAX_CHARS, hint: str = DEFAULT_CAP_HINT
) -> list[Tool]:
    """Every tool of ``tools`` wrapped in :class:`CappedTool` (the default cap)."""
    return [CappedTool(t, max_chars, hint) for t in tools]
