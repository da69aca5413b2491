"""Linear-time matching for text written by others.

Every pattern the guards run over third-party text is compiled here, with RE2
(``google-re2``): an automaton engine whose matching time grows with the text's length and
never with what the text holds. Python's backtracking engine can take seconds, or minutes,
on a long run of characters without spaces (base64, hex, many ``@`` or dots): one 50,000
character result once held the event loop for a minute and a half.

RE2 has no look-around and no back-references. Patterns that needed them are written with
a capturing group and a check in Python on the match (see :mod:`tether.guards.normalize`).
Its ``\\w``, ``\\d`` and ``\\b`` are ASCII; :data:`WORD` is the Unicode word character.

Bounds, per text: :data:`MAX_SCAN` characters are read, :data:`MAX_MATCHES` matches are
kept per pattern.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import cache
from typing import Any, Protocol

import re2  # type: ignore[import-untyped]

__all__ = [
    "MAX_MATCHES",
    "MAX_SCAN",
    "WORD",
    "LinearMatch",
    "LinearPattern",
    "compile_linear",
    "finditer",
    "is_linear",
]

MAX_SCAN = 200_000
"""Characters of one text that matching reads (a result is capped well below this)."""
MAX_MATCHES = 2_000
"""Matches of one pattern kept per text."""
WORD = r"\pL\pN_"
"""The Unicode word characters, for use inside a character class (``[{WORD}.-]``)."""


class LinearMatch(Protocol):
    """One match (the subset of ``re.Match`` RE2 offers that the guards use)."""

    def group(self, index: int = 0, /) -> Any: ...
    def start(self, index: int = 0, /) -> int: ...
    def end(self, index: int = 0, /) -> int: ...


class LinearPattern(Protocol):
    """A compiled pattern (the subset of ``re.Pattern`` the guards use)."""

    def finditer(self, text: str) -> Iterator[LinearMatch]: ...

    @property
    def groups(self) -> int: ...
    def search(self, text: str) -> LinearMatch | None: ...
    def fullmatch(self, text: str) -> LinearMatch | None: ...
    def sub(self, repl: str | Callable[[LinearMatch], str], text: str) -> str: ...

    @property
    def pattern(self) -> str: ...


@cache
def _options(ignore_case: bool) -> Any:
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not ignore_case
    options.max_mem = 64 << 20
    return options


def compile_linear(pattern: str, *, ignore_case: bool = False) -> LinearPattern:
    """``pattern`` compiled by RE2 (inline flags such as ``(?m)`` work); raises
    ``ValueError`` when RE2 cannot run it (look-around, back-references)."""
    try:
        compiled: LinearPattern = re2.compile(pattern, _options(ignore_case))
    except re2.error as exc:
        raise ValueError(f"not a linear-time pattern: {pattern[:80]!r} ({exc})") from None
    return compiled


def is_linear(pattern: str) -> bool:
    """Whether RE2 can run ``pattern``."""
    try:
        compile_linear(pattern)
    except ValueError:
        return False
    return True


def finditer(pattern: LinearPattern, text: str, *, limit: int = MAX_MATCHES) -> Iterator[str]:
    """The text of each match of ``pattern`` in the first :data:`MAX_SCAN` characters of
    ``text`` (its first group when it has groups), at most ``limit`` of them."""
    group = 1 if pattern.groups else 0
    for n, m in enumerate(pattern.finditer(text[:MAX_SCAN])):
        if n >= limit:
            return
        yield m.group(group) or ""
