"""Drafts people can trust: a degenerate draft is flagged and cannot be sent unedited.

A small model decoding greedily loops ("89.90 of 89.90 EUR refunded in total." twenty
times, the last one cut by the length limit), runs long, or leaves a placeholder where a
fact should be. :func:`problems` names each, in a sentence for the person who checks the
draft; :func:`tidy` removes repeated sentences, and the cut-off tail of a loop, from a
model's reply before it becomes a draft.
"""

from __future__ import annotations

import re
from collections import Counter

MAX_DRAFT = 1_200
"""Characters above which a draft is too long to be a support reply."""
MAX_REPEATS = 1
"""Times the same sentence may appear before the draft is called repetitive (a reply never
needs to say one sentence twice)."""
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
    if _cut_loop(_sentences(text)):
        found.append("It stops in the middle of a sentence it already wrote.")
    return found


def _cut_loop(sentences: list[str]) -> bool:
    """Whether the last sentence is the start of an earlier one, cut short: the tail of a
    loop that ran into the length limit."""
    if len(sentences) < 2 or sentences[-1][-1:] in ".!?":
        return False
    tail = _key(sentences[-1])
    return any(_key(s).startswith(tail) and _key(s) != tail for s in sentences[:-1])


def tidy(text: str) -> str:
    """``text`` with every sentence said before (alone, or inside an earlier sentence)
    removed, and the cut-off tail of a loop (the start of a sentence already there)."""
    seen: set[str] = set()
    kept = []
    sentences = _sentences(text)
    if _cut_loop(sentences):
        sentences = sentences[:-1]
    for sentence in sentences:
        key = _key(sentence)
        if key in seen or (len(key) > 12 and any(key in k for k in seen)):
            continue  # said already, alone or inside an earlier sentence
        seen.add(key)
        kept.append(sentence)
    return " ".join(kept) if kept else text.strip()
