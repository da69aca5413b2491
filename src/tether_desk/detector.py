"""Instruction-like text in third-party content, found and explained for the approver.

The approver of a refund reads the raw ticket; :func:`flag_instructions` points at the
passages written to steer *them* or the model rather than to describe a problem. The
runtime's detector (:func:`tether.guards.instructions.flag_instructions`) finds claimed
prior approvals, fake internal notes, attempts to override instructions, orders given to
staff, other order numbers, e-mail addresses and links; the desk adds one rule of its own:
an order number written with look-alike letters, Unicode dashes, non-ASCII digits or
hidden characters is named as such (matching runs on a folded copy of the text and maps
back to the original characters), since no tool or form accepts it.

This is a reading aid, not a barrier: the barrier is that no tool can reach another
order or send anything. :data:`Detector` is the seam the desk's screens call.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Literal, TypeAlias

from tether.guards.instructions import FlagKind
from tether.guards.instructions import flag_instructions as runtime_flags

ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e")
_CONFUSABLES = str.maketrans(
    "\u0410\u0412\u0421\u0415\u041d\u0406\u0408\u041a\u041c\u041e\u0420\u0422\u0425\u0423\u0430\u0435\u0456\u0458\u043e\u0440\u0441\u0445\u0443\u0455\u043a\u043c\u0442\u043d\u0432\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7\u03b1\u03b5\u03b9\u03ba\u03bd\u03bf\u03c1\u03c4\u03c5\u03c7\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d",
    "ABCEHIJKMOPTXYaeijopcxyskmthbABEZHIKMNOPTYXaeikvoptux---------",
)


DeskFlagKind: TypeAlias = FlagKind | Literal["disguised_order"]
"""The runtime's kinds (:data:`tether.guards.instructions.FlagKind`) and the desk's own."""


@dataclass(frozen=True, slots=True)
class Flag:
    """A span of the original text (``start``..``end``) and why it is flagged: ``kind`` for
    code (stable), ``reason`` for people (wording may change)."""

    start: int
    end: int
    text: str
    reason: str
    kind: DeskFlagKind


@dataclass(frozen=True, slots=True)
class Segment:
    """A piece of text to render; ``reasons`` is empty for plain text."""

    text: str
    reasons: tuple[str, ...] = ()


Detector = Callable[[str, str | None], list[Flag]]
"""``detector(text, own_order) -> flags``: the seam for a runtime-provided detector."""

_ORDER = re.compile(r"\b[A-Z]{1,3}\s?-\s?[0-9]{3,6}\b", re.IGNORECASE)


def fold(text: str) -> tuple[str, list[int]]:
    """The folded text and, for each of its characters, the index it came from."""
    out: list[str] = []
    where: list[int] = []
    for i, ch in enumerate(text):
        if ch in ZERO_WIDTH:
            continue
        folded = unicodedata.normalize("NFKC", ch).translate(_CONFUSABLES)
        if len(folded) == 1 and not folded.isascii() and folded.isdigit():
            folded = str(unicodedata.digit(folded, 0))
        for c in folded:
            out.append(c)
            where.append(i)
    return "".join(out), where


def flag_disguised_orders(text: str, own_order: str | None = None) -> list[Flag]:
    """Order numbers written with look-alike or hidden characters (even the ticket's own)."""
    folded, where = fold(text)
    flags: list[Flag] = []
    for m in _ORDER.finditer(folded):
        number = re.sub(r"\s", "", m.group()).upper()
        a, b = where[m.start()], where[m.end() - 1] + 1
        raw = text[a:b]
        if raw != m.group() or not raw.isascii():
            reason = f"an order number written with look-alike or hidden characters ({number})"
            flags.append(Flag(a, b, raw, reason, "disguised_order"))
    return flags


def flag_instructions(text: str, own_order: str | None = None) -> list[Flag]:
    """Every instruction-like span of ``text``, in order (see the module doc)."""
    expected = [own_order] if own_order else []
    flags = [
        Flag(f.start, f.end, text[f.start : f.end], f.reason, f.kind)
        for f in runtime_flags(text, expected=expected)
    ]
    flags += flag_disguised_orders(text, own_order)
    return sorted(flags, key=lambda f: (f.start, f.end))


def segments(text: str, flags: list[Flag]) -> list[Segment]:
    """``text`` cut at the flags' boundaries, each piece with the reasons that cover it."""
    flags = [f for f in flags if f.end > f.start]
    if not flags:
        return [Segment(text)]
    cuts = sorted({0, len(text), *(f.start for f in flags), *(f.end for f in flags)})
    out: list[Segment] = []
    for a, b in pairwise(cuts):
        reasons = tuple(dict.fromkeys(f.reason for f in flags if f.start <= a and b <= f.end))
        out.append(Segment(text[a:b], reasons))
    return out
