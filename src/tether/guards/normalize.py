"""Normalised matching of values: the same value, however it is written, gets one key.

:func:`fold` is the text form every comparison uses: Unicode NFKC, invisible characters
(zero-width, bidi controls, soft hyphens) removed, look-alike letters from other scripts
folded to their ASCII twin (Unicode's confusables data, through ``confusable-homoglyphs``),
case folded, whitespace collapsed. :func:`values` finds the distinctive values in a text
(e-mail addresses, URLs with or without a scheme, IBANs compact or spaced, phone and
account numbers, identifiers such as ``C-2210``, channels, handles, secret-like tokens) and
gives each a canonical key (``url:evil.example/x``, ``iban:FR76...``, ``num:0612345678``).
:func:`decodings` undoes the simple disguises a text can put on a value: spelled out letter
by letter, ``at``/``dot`` words, percent-encoding, base64, hex, reversed, rot13.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import unquote

from tether.guards.linear import (
    MAX_MATCHES,
    MAX_SCAN,
    WORD,
    LinearMatch,
    LinearPattern,
    compile_linear,
    finditer,
)

__all__ = [
    "MAX_VALUES",
    "Value",
    "compact",
    "decodings",
    "digits",
    "disguised",
    "fold",
    "plausible",
    "url_key",
    "value_keys",
    "values",
]


@cache
def _homoglyphs() -> dict[int, str]:
    """Non-ASCII characters that look like one ASCII letter or digit, mapped to it."""
    from confusable_homoglyphs.confusables import confusables_data  # type: ignore[import-untyped]

    table: dict[int, str] = {}
    for char, twins in confusables_data.items():
        if len(char) != 1 or char.isascii():
            continue
        for twin in twins:
            c = twin.get("c", "")
            if len(c) == 1 and c.isascii() and c.isalnum():
                table[ord(char)] = c
                break
    return table


_SPACE = re.compile(r"\s+")


def fold(text: str) -> str:
    """``text`` in the form all matching uses (see the module doc)."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")
    if not text.isascii():
        text = text.translate(_homoglyphs())
    return _SPACE.sub(" ", text.casefold()).strip()


def disguised(text: str) -> bool:
    """Whether ``text`` holds invisible characters or letters that only look like ASCII
    (an address written so is not the address it resembles)."""
    text = unicodedata.normalize("NFKC", text)
    if any(unicodedata.category(c) == "Cf" for c in text):
        return True
    return not text.isascii() and text.translate(_homoglyphs()) != text


def compact(text: str) -> str:
    """Folded letters and digits only: what survives any spacing or punctuation."""
    return "".join(c for c in fold(text) if c.isalnum())


def digits(text: str) -> str:
    """The ASCII digits of ``text`` (after NFKC, so full-width digits count)."""
    return "".join(c for c in unicodedata.normalize("NFKC", text) if "0" <= c <= "9")


@dataclass(frozen=True, slots=True)
class Value:
    """One distinctive value found in a text."""

    kind: str
    key: str
    text: str


MAX_VALUES = 1_000
"""Distinct values kept per text."""
_TLD = (
    "com|net|org|io|co|fr|de|uk|eu|es|it|nl|be|ch|info|biz|app|dev|xyz|ru|cn|me|ly|to|"
    "example|test|invalid|site|online|shop|top|link|click"
)
_W = WORD
# Linear-time patterns (RE2: no look-around). Where a pattern needs the character before a
# value, it matches it outside the value's group; :func:`_accept` checks what follows.
_PATTERNS: tuple[tuple[str, LinearPattern], ...] = (
    ("email", compile_linear(rf"[{_W}.+-]+@[{_W}-]+(?:\.[{_W}-]+)+")),
    ("url", compile_linear(r"(?:\b[a-z][a-z0-9+.-]*://|\bwww\.)[^\s\"'<>()\[\]{}]+")),
    (
        "url",
        compile_linear(
            rf"(?:^|[^@{_W}.-])((?:[a-z0-9-]+\.)+(?:{_TLD})\b(?:/[^\s\"'<>()\[\]{{}}]*)?)"
        ),
    ),
    (
        "iban",
        compile_linear(r"\b[a-z]{2}\d{2}(?:[ -]?[a-z0-9]{4}){2,7}(?:[ -]?[a-z0-9]{1,3})?\b"),
    ),
    ("number", compile_linear(rf"(?:^|[^{_W}.])(\+?\d(?:[ .-]?\d){{4,}})")),
    ("number", compile_linear(r"[a-z](\d{6,})")),  # digits right after letters (FR7630...)
    ("id", compile_linear(r"\b[a-z]{1,6}(?:-\d+|\d{2,})\b")),
    ("channel", compile_linear(rf"(?:^|[^{_W}&])(#[a-z0-9][{_W}.-]+)")),
    ("handle", compile_linear(rf"(?:^|[^{_W}.@])(@[a-z0-9_][{_W}.-]+)")),
    ("token", compile_linear(rf"\b([{_W}-]{{12,}})\b")),
)
_TRAILING = ".,;:!?)]}'\"/"
_DATE = compile_linear(r"\d{4}-\d{2}-\d{2}(?: \d{2})?|\d{1,2}[./-]\d{1,2}[./-]\d{2,4}(?: \d{2})?")
_HAS_DIGIT = compile_linear(r"\d")
_HAS_LETTER = compile_linear(r"[a-z]")
_HOST_END = compile_linear(rf"^(?:[a-z0-9-]+\.)+(?:{_TLD})\b")


def _accept(kind: str, folded: str, m: LinearMatch, text: str) -> bool:
    """The checks RE2 cannot make inside a pattern."""
    if kind == "number":
        return not _DATE.fullmatch(text)
    if kind == "token":
        return bool(_HAS_DIGIT.search(text) and _HAS_LETTER.search(text))
    if kind == "url" and not text.startswith("www.") and "://" not in text:
        host = _HOST_END.search(text)
        after = m.start(1) + (host.end() if host else len(text))
        return after >= len(folded) or folded[after] not in "@-"
    return True


def url_key(url: str) -> str:
    """A URL's key: no scheme, no ``www.``, no default port, percent-decoded, no trailing
    slash or punctuation, folded."""
    u = fold(unquote(url)).rstrip(_TRAILING)
    u = re.sub(r"^[a-z][a-z0-9+.-]*://", "", u)
    u = re.sub(r"^www\.", "", u)
    host, sep, rest = u.partition("/")
    host = re.sub(r":(?:80|443)$", "", host)
    return (host + sep + rest).rstrip("/")


def _key(kind: str, text: str) -> str | None:
    t = text.rstrip(_TRAILING)
    if kind == "email":
        return f"email:{t}"
    if kind == "url":
        return f"url:{url_key(t)}"
    if kind == "iban":
        c = compact(t).upper()
        return f"iban:{c}" if 15 <= len(c) <= 34 else None
    if kind == "number":
        d = digits(t)
        d = d[2:] if d.startswith("00") else d
        return f"num:{d}" if len(d) >= 5 else None
    if kind == "id":
        return f"id:{compact(t)}"
    if kind in ("channel", "handle"):
        return f"{kind}:{t[1:]}"
    return f"token:{t}"


def values(text: str) -> list[Value]:
    """The distinctive values in ``text`` (folded), each once, in order of kind."""
    folded = fold(text[:MAX_SCAN])
    found: dict[str, Value] = {}
    for kind, pattern in _PATTERNS:
        group = 1 if pattern.groups else 0
        for n, m in enumerate(pattern.finditer(folded)):
            if n >= MAX_MATCHES or len(found) >= MAX_VALUES // 2:  # half: room for hosts
                break
            hit = m.group(group) or ""
            if not _accept(kind, folded, m, hit):
                continue
            key = _key(kind, hit)
            if key and key not in found:
                found[key] = Value(kind, key, hit.rstrip(_TRAILING))
    for v in list(found.values()):
        if v.kind == "number":
            d = v.key[4:]
            if len(d) >= 9:  # +33 6 12 34 56 78 and 06 12 34 56 78 are one phone
                found.setdefault(f"tail:{d[-9:]}", Value("number", f"tail:{d[-9:]}", v.text))
        if v.kind == "url":
            host = v.key[4:].split("/", 1)[0]
            found.setdefault(f"host:{host}", Value("host", f"host:{host}", host))
        if v.kind == "email":
            host = v.key.rsplit("@", 1)[1]
            found.setdefault(f"host:{host}", Value("host", f"host:{host}", host))
    return list(found.values())


_KNOWN_TLD = compile_linear(rf"\.(?:{_TLD})$")


def plausible(value: Value) -> bool:
    """Whether a value read through a blind decoding (reversed, rot13) looks real: an
    address or a link on a known top-level domain."""
    if value.kind not in ("email", "url", "host"):
        return False
    host = value.key.split(":", 1)[1].rsplit("@", 1)[-1].split("/", 1)[0]
    return bool(_KNOWN_TLD.search(host))


def value_keys(value: str) -> set[str]:
    """Every key ``value`` answers to: its folded whole (``text:...``) and its values."""
    keys = {f"text:{fold(value)}"}
    keys.update(v.key for v in values(value))
    return keys


_SPELLED = compile_linear(r"(^|\s)((?:\S[ \t_·*|-]+){3,}\S[.,;:!?]?)(\s|$)")
_SEPARATORS = {ord(c): None for c in " \t_·*|-"}
_AT = compile_linear(r"\s*(?:[\[(]\s*(?:at|arobase)\s*[\])]|\s(?:at|arobase)\s)\s*")
_DOT = compile_linear(r"\s*(?:[\[(]\s*(?:dot|point)\s*[\])]|\s(?:dot|point)\s)\s*")
_B64 = compile_linear(r"[A-Za-z0-9+/_-]{12,}={0,2}")
_HEX = compile_linear(r"\b(?:[0-9a-fA-F]{2}){6,}\b")
MAX_DECODED = 64
"""Encoded tokens (base64, hex) decoded per text."""
_MAX_TOKEN = 16_384


def _printable(raw: bytes) -> str | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() and len(text) >= 4 else None


def _b64(token: str) -> str | None:
    padded = token + "=" * (-len(token) % 4)
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            text = _printable(decode(padded))
        except (binascii.Error, ValueError):
            continue
        if text:
            return text
    return None


def decodings(text: str) -> Iterator[tuple[str, str]]:
    """Readings of ``text`` with a simple disguise undone, as ``(how, text)``."""
    text = text[:MAX_SCAN]
    folded = fold(text)
    spelled = _SPELLED.sub(
        lambda m: m.group(1) + m.group(2).translate(_SEPARATORS) + m.group(3), folded
    )
    if spelled != folded:
        yield "spelled out", spelled
    worded = _DOT.sub(".", _AT.sub("@", spelled))
    if worded != spelled:
        yield "written with at/dot words", worded
    if "%" in text:
        yield "percent-encoded", unquote(text)
    for token in finditer(_B64, text, limit=MAX_DECODED):
        plain = _b64(token[:_MAX_TOKEN])
        if plain:
            yield "base64", plain
    for token in finditer(_HEX, text, limit=MAX_DECODED):
        plain = _printable(bytes.fromhex(token[: _MAX_TOKEN & ~1]))
        if plain:
            yield "hex", plain
    yield "reversed", folded[::-1]
    yield "rot13", codecs.decode(folded, "rot13")


def strings_in(value: Any) -> Iterator[str]:
    """Every non-blank string in a JSON-like ``value`` (mapping keys included, numbers as
    their text), in order."""
    if isinstance(value, str):
        if value.strip():
            yield value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str) and k.strip():
                yield k  # a key is a value too: it can carry an address
            yield from strings_in(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from strings_in(v)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)
