"""Drafts people can trust: a degenerate draft is flagged and cannot be sent unedited.

A small model decoding greedily loops ("89.90 of 89.90 EUR refunded in total." twenty
times), runs long, or leaves a placeholder where a fact should be. :func:`problems` names
each, in a sentence for the person who checks the draft; :func:`tidy` removes repeated
sentences from a model's reply before it becomes a draft.
"""

from __future__ import annotations

import re
from collections import Counter

MAX_DRAFT = 1_200
"""Characters above which a draft is too long to be a support reply."""
MAX_REPEATS = 2
"""Times the same sentence may appear before the draft is called repetitive."""
_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
_PLACEHOLDER = re.compile(
    r"\{\{?\s*[A-Za-z_][\w ]*\}?\}|\[(?:[A-Z_][A-Z_ ]+|amount|order|name|date)\]|<[a-z_ ]+>"
    r"|\bX{2,}(?:[.,]X{2})?\b|\?\?+",
)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _BREAK.split(text) if len(s.strip()) > 3]


def _key(sentence: str) -> str:
    return re.sub(r"\W+", " ", sentence.casefold()).strip()


def problems(text: str) -> list[str]:
    """Why ``text`` should not be sent as it is (empty: nothing found)."""
    found = []
    counts = Counter(_key(s) for s in _sentences(text))
    repeated = [(k, n) for k, n in counts.items() if n > MAX_REPEATS and k]
    if repeated:
        key, n = max(repeated, key=lambda kn: kn[1])
        found.append(f'It repeats "{key[:60]}" {n} times.')
    if len(text) > MAX_DRAFT:
        found.append(f"It is {len(text):,} characters long; keep a reply under {MAX_DRAFT:,}.")
    holes = sorted({m.group(0) for m in _PLACEHOLDER.finditer(text)})
    if holes:
        found.append(f"It has unfilled placeholders: {', '.join(holes[:5])}.")
    return found


def tidy(text: str) -> str:
    """``text`` with every sentence after its first occurrence removed."""
    seen: set[str] = set()
    kept = []
    for sentence in _sentences(text):
        key = _key(sentence)
        if key in seen:
            continue
        seen.add(key)
        kept.append(sentence)
    return " ".join(kept) if kept else text.strip()
