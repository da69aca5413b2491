"""Typed objects: where the thing a call acts on came from.

An object argument (a file, an event, a booking) is traced, never guessed from words:

* **named by the user**: the value is a whole token of the user's request (``F-9``,
  ``13``), and not part of a date or a time ("June 13" names no file 13); a value of
  several words must be a whole phrase of the request;
* **the record the user described**: the value is the id of a record read from a system
  of record, one of whose other system fields (its title, its name) is a whole phrase of
  the request and belongs to no other record read ("the *Old sync* event"); a phrase two
  records share ("a hotel in *Lyon*") leaves the choice to the agent, so it does not count;
* **vouched for by the application** (its own records, any kind);
* **seen as an id of its kind**: in a system field of a result, typed by the tool's
  ``kinds`` declaration or by a field named ``<kind>_id``. An id of another kind does not
  count (an event's id 13 is not file 13).

Everything lives in the provenance store's plain data (``ctx.memo``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tether.guards.linear import compile_linear, finditer
from tether.guards.normalize import compact, fold

if TYPE_CHECKING:
    from tether.guards.store import ProvenanceStore
    from tether.tools import Tool

__all__ = ["Trace", "TraceKind", "date_spans", "object_kind", "record_objects", "trace"]

TraceKind = Literal["user", "user_record", "application", "system"]
_MONTHS = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec|janvier|f[ée]vrier|mars|avril|mai|juin"
    "|juillet|ao[uû]t|septembre|octobre|novembre|d[ée]cembre"
    "|monday|tuesday|wednesday|thursday|friday|saturday|sunday"
    "|lundi|mardi|mercredi|jeudi|vendredi|samedi|dimanche"
)
_DATES = compile_linear(
    rf"(?i)(?:\b\d{{1,2}}(?:st|nd|rd|th|er)?(?:\s+of)?\s+(?:{_MONTHS})\b(?:,?\s+\d{{4}})?"
    rf"|\b(?:{_MONTHS})\.?\s+\d{{1,2}}(?:st|nd|rd|th|er)?\b(?:,?\s+\d{{4}})?"
    r"|\b\d{4}-\d{2}-\d{2}(?:[ t]\d{1,2}:\d{2})?\b|\b\d{1,2}[./]\d{1,2}(?:[./]\d{2,4})?\b"
    r"|\b\d{1,2}(?::\d{2})+\s*(?:am|pm|h)?\b|\b\d{1,2}\s*(?:am|pm|h)\b)"
)
_WORDS = re.compile(r"[^\W_]+")
_TOKEN = compile_linear(r"[^\s\"'«»()\[\]{},;!?]+")
_STRIP = ".:-_'\""
_MAX_TOKENS = 2_000
_MAX_LINKS = 2_000
_MAX_PHRASE = 80


@dataclass(frozen=True, slots=True)
class Trace:
    """How an object value is accounted for, and by what (a phrase, a source)."""

    kind: TraceKind
    detail: str = ""


def date_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` (folded) writes a date or a time."""
    return [(m.start(), m.end()) for m in _DATES.finditer(text)]


def _words(text: str) -> str:
    """``text``'s words (letters and digits), folded, one space apart."""
    return " ".join(_WORDS.findall(fold(text)))


def record_request(store: ProvenanceStore, text: str) -> None:
    """Record the user's request: its whole tokens, except those inside dates and times,
    and its words (for phrase matches)."""
    folded = fold(text)
    dates = date_spans(folded)
    data = store.data
    tokens: list[str] = data.setdefault("user_tokens", [])
    for m in _TOKEN.finditer(folded):
        if len(tokens) >= _MAX_TOKENS:
            break
        if any(a < m.end() and m.start() < b for a, b in dates):
            continue
        token = compact(m.group(0).strip(_STRIP))
        if token and token not in tokens:
            tokens.append(token)
    data["request"] = (data.get("request", "") + " " + _words(text))[-8_000:]


def named_phrase(store: ProvenanceStore, phrase: str) -> bool:
    """Whether ``phrase`` is a whole phrase of the user's request."""
    words = _words(phrase)
    request = store.data.get("request", "")
    return bool(words) and f" {words} " in f" {request} "


def object_kind(tool: Tool, argument: str) -> str | None:
    """The kind of object ``argument`` of ``tool`` names: declared in ``kinds``, else from
    a name like ``file_id``; ``None`` when untyped."""
    kind = tool.kinds.get(argument)
    if kind:
        return kind
    return argument[:-3] if argument.endswith("_id") and len(argument) > 3 else None


def _field_kind(kinds: Mapping[str, str], path: str) -> str | None:
    kind = kinds.get(path)
    if kind:
        return kind
    last = path.rsplit(".", 1)[-1]
    return last[:-3] if last.endswith("_id") and len(last) > 3 else None


def _is_id_field(path: str) -> bool:
    last = path.rsplit(".", 1)[-1]
    return last == "id" or last.endswith("_id")


def _records(node: Any, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if isinstance(node, Mapping):
        yield path, node
        for k, v in node.items():
            yield from _records(v, f"{path}.{k}" if path else str(k))
    elif isinstance(node, list):
        for v in node:
            yield from _records(v, path)


def _scalar(value: Any) -> str | None:
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def record_objects(
    store: ProvenanceStore,
    doc: Any,
    system: Any,
    kinds: Mapping[str, str],
    source: str,
) -> None:
    """Record the typed ids of a result's records and the system fields beside them.

    ``system(path)`` says whether the field at ``path`` is a system-of-record field."""
    links: dict[str, list[str]] = store.data.setdefault("links", {})
    owners: dict[str, list[str]] = store.data.setdefault("owners", {})
    for path, record in _records(doc, ""):
        fields = {}
        for k, v in record.items():
            text = _scalar(v)
            where = f"{path}.{k}" if path else str(k)
            if text is not None and system(where):
                fields[where] = text
        ids = {p: t for p, t in fields.items() if _is_id_field(p) or p in kinds}
        phrases = [
            t
            for p, t in fields.items()
            if p not in ids and len(t) <= _MAX_PHRASE and any(c.isalpha() for c in t)
        ]
        for p, value in ids.items():
            key = compact(value)
            if not key:
                continue
            kind = _field_kind(kinds, p)
            store.add_seen(f"obj:{kind or ''}:{key}", "system", f"{source}: {p}")
            if len(links) < _MAX_LINKS:
                mine = links.setdefault(key, [])
                mine.extend(t for t in phrases if t not in mine and len(mine) < 20)
                for t in phrases:
                    holders = owners.setdefault(_words(t), [])
                    if key not in holders and len(holders) < 20:
                        holders.append(key)


def trace(store: ProvenanceStore, value: str, kind: str | None) -> Trace | None:
    """How ``value``, an object of ``kind``, is accounted for; ``None``: it is not."""
    key = compact(value)
    if not key:
        return None
    if " " in fold(value).strip():
        if named_phrase(store, value):
            return Trace("user", value)
    elif key in store.data.get("user_tokens", ()):
        return Trace("user", value)
    owners = store.data.get("owners", {})
    for phrase in store.data.get("links", {}).get(key, ()):
        if owners.get(_words(phrase)) == [key] and named_phrase(store, phrase):
            return Trace("user_record", phrase)  # the one record the request describes
    whole = store.seen(f"text:{fold(value)}")
    if whole is not None and whole.origin == "application":
        return Trace("application", whole.source)
    typed = store.seen(f"obj:{kind or ''}:{key}")
    if typed is not None and typed.origin == "system":
        return Trace("system", typed.source)
    if kind is None:  # an untyped argument: any system sighting of the whole value
        first = store.first(value)
        if first is not None and first.origin == "system":
            return Trace("system", first.source)
    return None


def mentioned_by_third_party(store: ProvenanceStore, value: str) -> bool:
    """Whether third-party text named ``value``, as a whole token or as a value."""
    return f"tok:{compact(value)}" in store.data["values"] or store.mentioned_by(value)


def third_party_tokens(store: ProvenanceStore, text: str, origin: str, source: str) -> None:
    """Record the whole tokens of untrusted text (so a short id like ``13`` counts as
    mentioned), at most :data:`_MAX_TOKENS` distinct ones per run."""
    data = store.data
    count = int(data.get("tok_count", 0))
    for token in finditer(_TOKEN, fold(text), limit=_MAX_TOKENS * 5):
        if count >= _MAX_TOKENS:
            break
        key = compact(token.strip(_STRIP))
        if key and len(key) <= 40 and f"tok:{key}" not in data["values"]:
            store.add_seen(f"tok:{key}", origin, source)
            count += 1
    data["tok_count"] = count
