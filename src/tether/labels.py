"""Provenance labels: the JSON envelope that third-party text travels in, and the cap
that respects it.

A labelled result reads::

    {"provenance": {"source": "ticket:T-17", "trusted": false}, "content": "..."}

:func:`cap_text` cuts a result to a length; for a labelled result it cuts the *content*
and re-encodes the envelope, so the label survives every cap (the envelope is kept whole
even when the limit is shorter than the label itself). :func:`read_label` fails closed: a
text that starts like an envelope but cannot be read is labelled untrusted.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["UNREADABLE", "Label", "cap_text", "label", "read_label"]

_PREFIX = '{"provenance"'
UNREADABLE = "unreadable provenance label"


@dataclass(frozen=True, slots=True)
class Label:
    """Where a result's content comes from, and whether the application trusts it."""

    source: str
    trusted: bool = False


def label(content: Any, source: str, *, trusted: bool = False) -> str:
    """``content`` as a JSON document labelled with its provenance."""
    return json.dumps(
        {"provenance": {"source": source, "trusted": trusted}, "content": content},
        ensure_ascii=False,
        default=str,
    )


def _parse(text: str) -> tuple[Label, Any] | None:
    try:
        doc = json.loads(text)
        mark = doc["provenance"]
        found = Label(str(mark["source"]), mark["trusted"] is True)
        return found, doc["content"]
    except (ValueError, KeyError, TypeError):
        return None


def read_label(text: str) -> Label | None:
    """The label of a labelled result; ``None`` for a plain one. A text that starts like a
    label but is not a whole, valid one reads as untrusted (fail closed)."""
    if not text.lstrip().startswith(_PREFIX):
        return None
    parsed = _parse(text)
    return parsed[0] if parsed is not None else Label(UNREADABLE, False)


def _notice(omitted: int, hint: str | None) -> str:
    how = f": {hint}" if hint else ""
    return f"\n[{omitted} characters omitted{how}]"


def cap_text(text: str, limit: int | None, hint: str | None = None) -> str:
    """``text`` cut to ``limit`` characters with a notice saying how much was left out
    and, when ``hint`` is given, how to get the rest (``[N characters omitted: hint]``).

    A labelled result keeps its envelope: the content is cut inside it instead.
    """
    if limit is None or len(text) <= limit:
        return text
    parsed = _parse(text) if text.lstrip().startswith(_PREFIX) else None
    if parsed is None:
        return f"{text[:limit]}{_notice(len(text) - limit, hint)}"
    mark, content = parsed
    inner = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    keep = len(inner)
    while True:
        keep = max(0, min(keep, len(inner) - 1))
        notice = _notice(len(inner) - keep, hint)
        capped = label(inner[:keep] + notice, mark.source, trusted=mark.trusted)
        over = len(capped) - limit
        if over <= 0 or keep == 0:
            return capped
        keep -= over
