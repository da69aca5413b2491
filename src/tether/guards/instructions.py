"""Instruction-like text in third-party content, found and explained for a human.

:func:`flag_instructions` returns the spans of a text that read like orders rather than
data, each with its reason: claims that an approval was already given, text posing as an
internal or system note, requests to ignore instructions, imperative requests addressed to
staff or an assistant, other order numbers than the ones expected, e-mail addresses, links,
account numbers, and values hidden by spelling or encoding. It is a screen for the
approver, not a barrier: it never decides a call.

Each flag carries a stable, machine-readable :attr:`Flag.kind` (one of :data:`FlagKind`) for
code, and a ``reason`` sentence for people. Code decides on the kind only: the reasons'
wording may change.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal, TypeAlias

from tether.guards.linear import MAX_MATCHES, MAX_SCAN, LinearPattern, compile_linear
from tether.guards.normalize import compact, decodings, fold, values

__all__ = [
    "INSTRUCTION_KINDS",
    "INSTRUCTION_REASONS",
    "REASONS",
    "Flag",
    "FlagKind",
    "flag_instructions",
]

FlagKind: TypeAlias = Literal[
    "claimed_approval",
    "fake_note",
    "override",
    "addresses_agent",
    "imperative",
    "invisible",
    "identifier",
    "email",
    "url",
    "iban",
    "number",
    "handle",
    "hidden_value",
]
"""What a flag found, for code (stable): a claimed prior approval, text posing as an internal
or system note, a request to ignore instructions, words addressed to the assistant or staff,
a sentence in the imperative ("refund me", "send ..."), invisible characters, an order or
record number other than the expected ones, an e-mail address, a link, a bank account
number, a long number, a user handle, a value hidden by an encoding."""

REASONS: dict[str, str] = {
    "claimed_approval": "claims an approval was already given",
    "fake_note": "poses as an internal or system note",
    "override": "asks to ignore instructions",
    "addresses_agent": "addresses the assistant or staff",
    "imperative": "gives an order",
    "invisible": "contains invisible characters",
    "identifier": "names an order or record",
    "other_identifier": "names another order or record",
    "email": "contains an e-mail address",
    "url": "contains a link",
    "iban": "contains a bank account number",
    "number": "contains a long number (account, phone)",
    "handle": "mentions a user handle",
    "hidden_value": "hides a value ({how})",
}
"""The sentence a person reads for each kind (``other_identifier``: an identifier when
others are expected). Wording only: no code should compare these."""


@dataclass(frozen=True, slots=True)
class Flag:
    """One suspicious span: ``text[start:end]`` is ``quote``; ``kind`` says what it is, for
    code (see :data:`FlagKind`), ``reason`` says it in words, for people."""

    start: int
    end: int
    quote: str
    reason: str
    kind: FlagKind


def _compile(pattern: str) -> LinearPattern:
    return compile_linear("(?im)" + pattern)


_PHRASES: tuple[tuple[FlagKind, LinearPattern], ...] = (
    (
        "claimed_approval",
        _compile(
            r"\b(?:already\s+(?:been\s+)?(?:validated|approved|authori[sz]ed|confirmed|cleared)"
            r"|pre-?approved|approval\s+(?:was\s+|has\s+been\s+)?(?:already\s+)?"
            r"(?:obtained|granted|given)|no\s+need\s+to\s+(?:ask|confirm|check|verify)"
            r"|validation\s+(?:d[ée]j[àa]\s+)?obtenue|d[ée]j[àa]\s+(?:valid|approuv|autoris)\w*"
            r"|sans\s+(?:demander|confirmation))"
        ),
    ),
    (
        "fake_note",
        _compile(
            r"\b(?:internal\s+note|note\s+interne|note\s+to\s+(?:staff|support|agents?|ai|the\s+assistant)"
            r"|message\s+from\s+(?:it|the\s+(?:admin|it\s+team|security\s+team|management))"
            r"|system\s+(?:message|notice|prompt|instruction)|\[(?:system|admin)\]"
            r"|important\s+(?:notice|instructions?)|from\s+the\s+ceo)\b"
        ),
    ),
    (
        "override",
        _compile(
            r"\b(?:ignore|disregard|forget|override|oublie[rz]?|ignore[rz])\b"
            r"(?:\s+\w+){0,3}?\s+(?:instructions?|rules|guidelines|prompt|consignes?|r[èe]gles)\b"
            r"|\bignore\s+(?:all|any|everything|previous|prior|the\s+above|tout)\b"
        ),
    ),
    (
        "addresses_agent",
        _compile(
            r"\b(?:ai\s+assistants?|assistant|agent|chatbot|llm|language\s+model|dear\s+support"
            r"|support\s+team|staff)\b[,:]?\s*(?:you\s+)?(?:must|should|need\s+to|please|have\s+to"
            r"|doi[st]|devez)\b|\byou\s+(?:must|need\s+to|have\s+to|are\s+(?:required|instructed)"
            r"\s+to)\b"
        ),
    ),
    (
        "imperative",
        _compile(
            r"(?:^|[.!?:]\s+|\n)\s*(?:please\s+|urgent(?:ly)?[:,]?\s+|now\s+)?"
            r"(?:send|forward|transfer|wire|pay|refund|delete|remove|cancel|book|post|share"
            r"|reply|e-?mail|click|visit|open|download|run|execute|change|update|add|invite"
            r"|grant|reset|move|reserve|buy|purchase|subscribe|rembourse[rz]?|envoie[rz]?|transf[eé]re[rz]?|supprime[rz]?"
            r"|annule[rz]?|paie[rz]?|payez|vire[rz]?|clique[rz]?|confirme[rz]?)\b[^.!?\n]*"
            r"|\bplease\s+(?:send|forward|transfer|wire|pay|refund|delete|remove|cancel|book"
            r"|post|share|reply|click|visit|change|update|add|invite|reserve|rent|buy|book"
            r"|include)\b[^.!?\n]*"
            r"|\b(?:rembourser|envoyer|transf[ée]rer|supprimer|annuler|payer|virer)\b[^.!?\n]*"
        ),
    ),
)
INSTRUCTION_KINDS: frozenset[FlagKind] = frozenset(kind for kind, _ in _PHRASES)
"""The kinds that mark a phrase (not a value) as instruction-like."""
INSTRUCTION_REASONS: frozenset[str] = frozenset(REASONS[kind] for kind in INSTRUCTION_KINDS)
"""The reasons of :data:`INSTRUCTION_KINDS` as worded when imported (for people; code
compares kinds)."""
_VALUE_KINDS: dict[str, FlagKind] = {k: k for k in ("email", "url", "iban", "number", "handle")}


_ASCII_SPACE = {ord(c): " " for c in "\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"}


def _folded_with_index(text: str) -> tuple[str, list[int]]:
    """``text`` folded per character, with each folded character's index in ``text``."""
    if text.isascii():  # folding ASCII is lower case, whitespace as one space
        return text.lower().translate(_ASCII_SPACE), list(range(len(text)))
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
    text = text[:MAX_SCAN]
    folded, index = _folded_with_index(text)
    flags: list[Flag] = []

    def add(start: int, end: int, kind: FlagKind, reason: str = "") -> None:
        if start >= end or not index:
            return
        a, b = index[start], index[min(end, len(index)) - 1] + 1
        flags.append(Flag(a, b, text[a:b].strip(), reason or REASONS[kind], kind))

    for kind, pattern in _PHRASES:
        for n, m in enumerate(pattern.finditer(folded)):
            if n >= MAX_MATCHES:
                break
            s = m.start() + (len(m.group()) - len(m.group().lstrip(" .!?:\n")))
            add(s, m.end(), kind)
    if any(unicodedata.category(c) == "Cf" for c in text):
        flags.append(Flag(0, 0, "", REASONS["invisible"], "invisible"))
    allowed = {compact(e) for e in expected}
    plain_values = values(text)
    plain_keys = {v.key for v in plain_values}
    for v in plain_values:
        if v.kind == "id" and compact(v.text) not in allowed:
            reason = REASONS["other_identifier" if allowed else "identifier"]
            _add_value(folded, v.text, "identifier", reason, add)
        elif v.kind in _VALUE_KINDS:
            value_kind = _VALUE_KINDS[v.kind]
            _add_value(folded, v.text, value_kind, REASONS[value_kind], add)
    for how, plain in decodings(text):
        if how in ("reversed", "rot13"):
            continue
        hidden = [v for v in values(plain) if v.kind in ("email", "url", "iban")]
        hidden = [v for v in hidden if v.key not in plain_keys]
        if hidden:
            reason = REASONS["hidden_value"].format(how=how)
            flags.append(Flag(0, 0, hidden[0].text, reason, "hidden_value"))
    flags.sort(key=lambda f: (f.start, f.end, f.kind))
    unique: list[Flag] = []
    for f in flags:
        if f not in unique:
            unique.append(f)
    return unique


def _add_value(
    folded: str,
    value: str,
    kind: FlagKind,
    reason: str,
    add: Callable[[int, int, FlagKind, str], None],
) -> None:
    at = folded.find(value)
    if at >= 0:
        add(at, at + len(value), kind, reason)
