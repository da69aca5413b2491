"""The linear-time value patterns find what the backtracking ones they replace found
(fuzzed on short texts, where backtracking is still quick)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.guards.normalize import _TLD, _key, fold, values

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?: \d{2})?|\d{1,2}[./-]\d{1,2}[./-]\d{2,4}(?: \d{2})?")
_REFERENCE = (  # the look-around patterns, for Python's engine
    ("email", re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")),
    ("url", re.compile(r"(?:\b[a-z][a-z0-9+.-]*://|\bwww\.)[^\s\"'<>()\[\]{}]+")),
    (
        "url",
        re.compile(
            rf"(?<![@\w.-])(?:[a-z0-9-]+\.)+(?:{_TLD})\b(?![@-])(?:/[^\s\"'<>()\[\]{{}}]*)?"
        ),
    ),
    ("iban", re.compile(r"\b[a-z]{2}\d{2}(?:[ -]?[a-z0-9]{4}){2,7}(?:[ -]?[a-z0-9]{1,3})?\b")),
    ("number", re.compile(r"(?<![\w.])\+?\d(?:[ .-]?\d){4,}(?![\d])")),
    ("number", re.compile(r"(?<=[a-z])\d{6,}")),
    ("id", re.compile(r"\b[a-z]{1,6}(?:-\d+|\d{2,})\b")),
    ("channel", re.compile(r"(?<![\w&])#[a-z0-9][\w.-]{1,}")),
    ("handle", re.compile(r"(?<![\w.@])@[a-z0-9_][\w.-]{1,}")),
    ("token", re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[a-z])[\w-]{12,}\b")),
)


def _reference_keys(text: str) -> set[str]:
    folded = fold(text)
    keys = set()
    for kind, pattern in _REFERENCE:
        for m in pattern.finditer(folded):
            if kind == "number" and _DATE.fullmatch(m.group()):
                continue
            key = _key(kind, m.group())
            if key:
                keys.add(key)
    return keys


def _keys(text: str) -> set[str]:
    return {v.key for v in values(text) if not v.key.startswith(("host:", "tail:"))}


ALPHABET = "ab1209@.-#:+ /wxZ_&fr7"


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=48))
def test_the_linear_patterns_find_the_same_values(text: str) -> None:
    assert _keys(text) == _reference_keys(text)


def test_known_values_are_found() -> None:
    text = "mail x.y@evil.example or www.evil.example/x; FR76 3000 6000 0112 3456 7890 189"
    assert _keys(text) == _reference_keys(text)
    assert "email:x.y@evil.example" in _keys(text)
