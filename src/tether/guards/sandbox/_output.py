"""Command output made safe to show a model and a terminal, and capped as it is read.

A command's bytes may hold terminal escape sequences (which recolour, move the cursor,
retitle or hide text in the trace a person reads), NUL bytes and invalid UTF-8. Before
they leave the sandbox module they become visible text: invalid UTF-8 becomes ``\\xNN``,
and every control character except newline and tab (C0, DEL, C1, so also ESC and CR) and
the Unicode bidirectional overrides become ``\\xNN`` or ``\\uNNNN`` escapes.
"""

from __future__ import annotations

import codecs

_KEPT = {"\n", "\t"}
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES: dict[int, str] = {
    code: f"\\x{code:02x}"
    for code in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
    if chr(code) not in _KEPT
}
_ESCAPES.update({code: f"\\u{code:04x}" for code in _BIDI})


def escape_controls(text: str) -> str:
    """``text`` with control characters (but newline and tab) and bidi overrides escaped."""
    return text.translate(_ESCAPES)


class CappedText:
    """Keeps the first ``limit`` characters of a byte stream, made safe, and counts the
    rest (characters of the escaped text)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept: list[str] = []
        self.kept_chars = 0
        self.omitted = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="backslashreplace")

    def feed(self, data: bytes, final: bool = False) -> None:
        text = escape_controls(self._decoder.decode(data, final))
        room = self.limit - self.kept_chars
        if room > 0:
            head = text[:room]
            self.kept.append(head)
            self.kept_chars += len(head)
            text = text[room:]
        self.omitted += len(text)

    def text(self) -> str:
        body = "".join(self.kept)
        return f"{body}\n[{self.omitted} characters omitted]" if self.omitted else body
