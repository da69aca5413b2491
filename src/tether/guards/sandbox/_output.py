"""Command output made safe to show a model and a terminal, and capped as it is read.

A command's bytes may hold terminal escape sequences (which recolour, move the cursor,
retitle or hide text in the trace a person reads), NUL bytes and invalid UTF-8. Before
they leave the sandbox module they become visible text: invalid UTF-8 becomes ``\\xNN``,
and every control character except newline and tab (C0, DEL, C1, so also ESC and CR) and
the Unicode bidirectional overrides become ``\\xNN`` or ``\\uNNNN`` escapes.

Only what is kept is decoded: past the cap, bytes are counted, never decoded, so a flood
of binary output costs the event loop a length addition per chunk.
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
_INVALID: dict[int, str] = {0xDC00 + byte: f"\\x{byte:02x}" for byte in range(0x80, 0x100)}
"""Bytes that are not UTF-8 (decoded as lone surrogates by ``surrogateescape``)."""
_ALL_ESCAPES = {**_ESCAPES, **_INVALID}
_MAX_UTF8 = 4
"""One kept character comes from at most four bytes."""


def escape_controls(text: str) -> str:
    """``text`` with control characters (but newline and tab) and bidi overrides escaped."""
    return text.translate(_ESCAPES)


class CappedText:
    """Keeps the first ``limit`` characters of a byte stream, made safe, and counts the
    bytes it does not show (``omitted``) without decoding them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept: list[str] = []
        self.kept_chars = 0
        self.received = 0
        """Bytes received."""
        self.shown = 0
        """Bytes whose text is kept."""
        self.full = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")

    @property
    def omitted(self) -> int:
        """Bytes received and not shown."""
        return self.received - self.shown

    def feed(self, data: bytes, final: bool = False) -> None:
        self.received += len(data)
        if self.full:
            return  # past the cap: counted only
        room = self.limit - self.kept_chars
        part = data[: _MAX_UTF8 * room]  # enough bytes for ``room`` characters
        decoded = self._decoder.decode(part, final and len(part) == len(data))
        text = decoded.translate(_ALL_ESCAPES)
        if len(text) <= room and len(part) == len(data):
            self._keep(text, decoded)
            return
        # the cap falls in this chunk: keep the characters whose escapes fit
        used = 0
        for count, char in enumerate(decoded):
            size = len(_ALL_ESCAPES.get(ord(char), char))
            if used + size > room:
                decoded = decoded[:count]
                break
            used += size
        self._keep(decoded.translate(_ALL_ESCAPES), decoded)
        self.full = True

    def _keep(self, text: str, decoded: str) -> None:
        self.kept.append(text)
        self.kept_chars += len(text)
        self.shown += len(decoded.encode("utf-8", "surrogateescape"))

    def text(self) -> str:
        body = "".join(self.kept)
        return f"{body}\n[{self.omitted} bytes omitted]" if self.omitted else body
