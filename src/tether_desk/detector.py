"""Instruction-like text in third-party content, found and explained for the approver.

The approver of a refund reads the raw ticket; this module points at the sentences that
are written to steer *them* or the model rather than to describe a problem: a claimed prior
approval ("validation deja obtenue"), a fake internal note, an attempt to override
instructions, an imperative aimed at staff, another order number, an e-mail address, a
URL, invisible characters. Matching runs on a folded copy of the text (NFKC, look-alike
letters and dashes, non-ASCII digits, zero-width characters removed) and maps each match
back to the original characters, so ``C-2210`` written with a Cyrillic ``C`` is still flagged.

This is a reading aid, not a barrier: the barrier is that no tool can reach another
order or send anything. :data:`Detector` is the seam through which a runtime detector can
replace :func:`flag_instructions`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise

ZERO_WIDTH = frozenset("\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e")
_CONFUSABLES = str.maketrans(
    "\u0410\u0412\u0421\u0415\u041d\u0406\u0408\u041a\u041c\u041e\u0420\u0422\u0425\u0423\u0430\u0435\u0456\u0458\u043e\u0440\u0441\u0445\u0443\u0455\u043a\u043c\u0442\u043d\u0432\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7\u03b1\u03b5\u03b9\u03ba\u03bd\u03bf\u03c1\u03c4\u03c5\u03c7\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe63\uff0d",
    "ABCEHIJKMOPTXYaeijopcxyskmthbABEZHIKMNOPTYXaeikvoptux---------",
)


@dataclass(frozen=True, slots=True)
class Flag:
    """A span of the original text (``start``..``end``) and why it is flagged."""

    start: int
    end: int
    text: str
    reason: str


@dataclass(frozen=True, slots=True)
class Segment:
    """A piece of text to render; ``reasons`` is empty for plain text."""

    text: str
    reasons: tuple[str, ...] = ()


Detector = Callable[[str, str | None], list[Flag]]
"""``detector(text, own_order) -> flags``: the seam for a runtime-provided detector."""

_VERBS = (
    r"rembourse[rz]?|refund|envoye[rz]|envoie[rz]?|send|confirme[rz]?|confirm|transf[eé]re[rz]?"
    r"|transfer|forward|vire[rz]|wire|pay|paye[rz]|annule[rz]|cancel|supprime[rz]|delete"
    r"|valide[rz]|approve|ex[eé]cute[rz]|execute|cr[eé]dite[rz]|credit"
)
_RULES: tuple[tuple[str, str], ...] = (
    (
        r"(?:validation|approbation|autorisation|accord)\s+(?:d[eé]j[aà]\s+)?(?:obtenue?|donn[eé]e?|accord[eé]e?|valid[eé]e?)"
        r"|d[eé]j[aà]\s+(?:valid[eé]e?s?|approuv[eé]e?s?|autoris[eé]e?s?|accord[eé]e?s?)"
        r"|already\s+(?:been\s+)?(?:validated|approved|authori[sz]ed|cleared|confirmed)"
        r"|pre-?approved|approval\s+(?:has\s+been\s+|was\s+)?(?:granted|obtained|given)",
        "claims an approval was already given: the approver is the one who decides",
    ),
    (
        r"note\s+interne|internal\s+note|message\s+interne|internal\s+message"
        r"|service\s+client\s*:|(?:from|de\s+la\s+part\s+d[eu])\s+(?:the\s+|la\s+)?"
        r"(?:support|management|direction|admin\w*)(?:\s+team)?|\badmin(?:istrat\w+)?\s*:",
        "poses as an internal or staff message inside a customer's ticket",
    ),
    (
        r"ignore[rz]?\s+(?:all\s+|the\s+|any\s+|toutes?\s+|les\s+|tes\s+|vos\s+)?"
        r"(?:previous\s+|above\s+|pr[eé]c[eé]dentes?\s+)?(?:instructions?|consignes?|rules?|r[eè]gles?)"
        r"|disregard|oublie[rz]?\s+(?:tes|les|vos)\s+(?:instructions|consignes)"
        r"|system\s+prompt|you\s+are\s+now|tu\s+es\s+maintenant|new\s+instructions?",
        "tries to override the agent's instructions",
    ),
    (
        rf"(?:^|(?<=[.:;!?\n])\s*|(?<=,)\s*|\b(?:puis|then|and\s+then|ensuite)\s+)(?:{_VERBS})\b",
        "an imperative addressed to staff or the agent, not a description of a problem",
    ),
    (r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+", "an e-mail address: replies go only to the account's own"),
    (r"\b(?:https?://|www\.)[^\s\"'<>]*[^\s\"'<>.,;:!?)]", "a link: nothing in a ticket needs one"),
)
_COMPILED = [(re.compile(p, re.IGNORECASE | re.MULTILINE), why) for p, why in _RULES]
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


def flag_instructions(text: str, own_order: str | None = None) -> list[Flag]:
    """Every instruction-like span of ``text``, in order (see the module doc)."""
    folded, where = fold(text)
    flags: list[Flag] = []

    def add(start: int, end: int, reason: str) -> None:
        if end <= start:
            return
        a, b = where[start], where[end - 1] + 1
        flags.append(Flag(a, b, text[a:b], reason))

    for pattern, why in _COMPILED:
        for m in pattern.finditer(folded):
            lead = len(m.group()) - len(m.group().lstrip())
            add(m.start() + lead, m.end(), why)
    for m in _ORDER.finditer(folded):
        number = re.sub(r"\s", "", m.group()).upper()
        raw = text[where[m.start()] : where[m.end() - 1] + 1]
        if raw != m.group() or not raw.isascii():
            add(
                m.start(),
                m.end(),
                f"an order number written with look-alike or hidden characters ({number})",
            )
        elif own_order is None or number != own_order:
            add(
                m.start(),
                m.end(),
                f"names another order ({number}): tools only reach this ticket's order",
            )
    hidden = [i for i, ch in enumerate(text) if ch in ZERO_WIDTH]
    if hidden:
        i = hidden[0]
        flags.append(Flag(i, i + 1, text[i], f"{len(hidden)} invisible character(s) in the text"))
    return sorted(flags, key=lambda f: (f.start, f.end))


def segments(text: str, flags: list[Flag]) -> list[Segment]:
    """``text`` cut at the flags' boundaries, each piece with the reasons that cover it."""
    if not flags:
        return [Segment(text)]
    cuts = sorted({0, len(text), *(f.start for f in flags), *(f.end for f in flags)})
    out: list[Segment] = []
    for a, b in pairwise(cuts):
        reasons = tuple(dict.fromkeys(f.reason for f in flags if f.start <= a and b <= f.end))
        out.append(Segment(text[a:b], reasons))
    return out
