"""Instruction-like text in third-party content, found and explained for a human.

:func:`flag_instructions` returns the spans of a text that read like orders rather than
data, each with its reason: claims that an approval was already given, text posing as an
internal or system note, requests to ignore instructions, imperative requests addressed to
staff or an assistant, other order numbers than the ones expected, e-mail addresses, links,
account numbers, and values hidden by spelling or encoding. It is a screen for the
approver, not a barrier: it never decides a call.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Collection
from dataclasses import dataclass

from tether.guards.normalize import compact, decodings, fold, values

__all__ = ["INSTRUCTION_REASONS", "Flag", "flag_instructions"]


@dataclass(frozen=True, slots=True)
class Flag:
    """One suspicious span: ``text[start:end]`` is ``quote``."""

    start: int
    end: int
    quote: str
    reason: str


_I = re.IGNORECASE | re.MULTILINE
_PHRASES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "claims an approval was already given",
        re.compile(
            r"\b(?:already\s+(?:been\s+)?(?:validated|approved|authori[sz]ed|confirmed|cleared)"
            r"|pre-?approved|approval\s+(?:was\s+|has\s+been\s+)?(?:already\s+)?"
            r"(?:obtained|granted|given)|no\s+need\s+to\s+(?:ask|confirm|check|verify)"
            r"|validation\s+(?:d[ée]j[àa]\s+)?obtenue|d[ée]j[àa]\s+(?:valid|approuv|autoris)\w*"
            r"|sans\s+(?:demander|confirmation))",
            _I,
        ),
    ),
    (
        "poses as an internal or system note",
        re.compile(
            r"\b(?:internal\s+note|note\s+interne|note\s+to\s+(?:staff|support|agents?|ai|the\s+assistant)"
            r"|message\s+from\s+(?:it|the\s+(?:admin|it\s+team|security\s+team|management))"
            r"|system\s+(?:message|notice|prompt|instruction)|\[(?:system|admin)\]"
            r"|important\s+(?:notice|instructions?)|from\s+the\s+ceo)\b",
            _I,
        ),
    ),
    (
        "asks to ignore instructions",
        re.compile(
            r"\b(?:ignore|disregard|forget|override|oublie[rz]?|ignore[rz])\b"
            r"(?:\s+\w+){0,3}?\s+(?:instructions?|rules|guidelines|prompt|consignes?|r[èe]gles)\b"
            r"|\bignore\s+(?:all|any|everything|previous|prior|the\s+above|tout)\b",
            _I,
        ),
    ),
    (
        "addresses the assistant or staff",
        re.compile(
            r"\b(?:ai\s+assistants?|assistant|agent|chatbot|llm|language\s+model|dear\s+support"
            r"|support\s+team|staff)\b[,:]?\s*(?:you\s+)?(?:must|should|need\s+to|please|have\s+to"
            r"|doi[st]|devez)\b|\byou\s+(?:must|need\s+to|have\s+to|are\s+(?:required|instructed)"
            r"\s+to)\b",
            _I,
        ),
    ),
    (
        "gives an order",
        re.compile(
            r"(?:^|[.!?:]\s+|\n)\s*(?:please\s+|urgent(?:ly)?[:,]?\s+|now\s+)?"
            r"(?:send|forward|transfer|wire|pay|refund|delete|remove|cancel|book|post|share"
            r"|reply|e-?mail|click|visit|open|download|run|execute|change|update|add|invite"
            r"|grant|reset|move|reserve|buy|purchase|subscribe|rembourse[rz]?|envoie[rz]?|transf[eé]re[rz]?|supprime[rz]?"
            r"|annule[rz]?|paie[rz]?|payez|vire[rz]?|clique[rz]?|confirme[rz]?)\b[^.!?\n]*"
            r"|\bplease\s+(?:send|forward|transfer|wire|pay|refund|delete|remove|cancel|book"
            r"|post|share|reply|click|visit|change|update|add|invite|reserve|rent|buy|book"
            r"|include)\b[^.!?\n]*"
            r"|\b(?:rembourser|envoyer|transf[ée]rer|supprimer|annuler|payer|virer)\b[^.!?\n]*",
            _I,
        ),
    ),
)
INSTRUCTION_REASONS: frozenset[str] = frozenset(reason for reason, _ in _PHRASES)
"""The reasons that mark a phrase (not a value) as instruction-like."""
_VALUE_REASONS = {
    "email": "contains an e-mail address",
    "url": "contains a link",
    "iban": "contains a bank account number",
    "number": "contains a long number (account, phone)",
    "handle": "mentions a user handle",
}


def _folded_with_index(text: str) -> tuple[str, list[int]]:
    """``text`` folded per character, with each folded character's index in ``text``."""
    out: list[str] = []
    index: list[int] = []
    for i, ch in enumerate(text):
        if unicodedata.category(ch) == "Cf":
            continue
        piece = fold(ch) if not ch.isspace() else " "
        out.append(piece)
        index.extend([i] * len(piece))
    return "".join(out), index


def flag_instructions(text: str, *, expected: Collection[str] = ()) -> list[Flag]:
    """The instruction-like spans of ``text``, in order, each with its reason.

    ``expected`` lists the identifiers the text may name without being flagged (the
    ticket's own order); every other order or record number is flagged.
    """
    folded, index = _folded_with_index(text)
    flags: list[Flag] = []

    def add(start: int, end: int, reason: str) -> None:
        if start >= end or not index:
            return
        a, b = index[start], index[min(end, len(index)) - 1] + 1
        flags.append(Flag(a, b, text[a:b].strip(), reason))

    for reason, pattern in _PHRASES:
        for m in pattern.finditer(folded):
            s = m.start() + (len(m.group()) - len(m.group().lstrip(" .!?:\n")))
            add(s, m.end(), reason)
    if any(unicodedata.category(c) == "Cf" for c in text):
        flags.append(Flag(0, 0, "", "contains invisible characters"))
    allowed = {compact(e) for e in expected}
    for v in values(text):
        if v.kind == "id" and compact(v.text) not in allowed:
            reason = "names another order or record" if allowed else "names an order or record"
            _add_value(folded, v.text, reason, add)
        elif v.kind in _VALUE_REASONS:
            _add_value(folded, v.text, _VALUE_REASONS[v.kind], add)
    for how, plain in decodings(text):
        if how in ("reversed", "rot13"):
            continue
        hidden = [v for v in values(plain) if v.kind in ("email", "url", "iban")]
        hidden = [v for v in hidden if v.key not in {w.key for w in values(text)}]
        if hidden:
            flags.append(Flag(0, 0, hidden[0].text, f"hides a value ({how})"))
    flags.sort(key=lambda f: (f.start, f.end, f.reason))
    unique: list[Flag] = []
    for f in flags:
        if f not in unique:
            unique.append(f)
    return unique


def _add_value(folded: str, value: str, reason: str, add: Callable[[int, int, str], None]) -> None:
    at = folded.find(value)
    if at >= 0:
        add(at, at + len(value), reason)
