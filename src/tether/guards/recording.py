"""Recording tool results in the provenance store, field by field.

:func:`record_result` reads one result: labelled envelopes, JSON fields (third-party paths
as third-party text, the rest as system-of-record values, secret fields as secrets, typed
ids and the records they belong to), and results whose fields cannot be told apart (not
JSON, or cut by the cap), which count as third-party text and raise a warning. With
``member``, third-party fields of a record whose author is a registered member of the
user's organisation count as vouched for by the application (author trust: opt in).

:func:`settle_store` reads queued results in a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether._workers import run_in_worker
from tether.guards.instructions import INSTRUCTION_KINDS, INSTRUCTION_REASONS, flag_instructions
from tether.guards.normalize import compact
from tether.guards.objects import record_objects
from tether.guards.store import ProvenanceStore
from tether.labels import read_label
from tether.tools import Tool

__all__ = ["LARGE_RESULT", "ResultSource", "instructed", "record_result", "settle_store"]

_MAX_FLAGS = 200
_MAX_LINES = 1_000
_LOG = logging.getLogger("tether.guards")
LARGE_RESULT = 8_000
"""Results longer than this (characters) are read in a worker thread, off the event loop."""
Member = Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class ResultSource:
    """What :func:`record_result` needs of a tool (plain data: it is queued in the memo)."""

    name: str
    effect: str | None
    third_party: tuple[str, ...]
    kinds: Mapping[str, str]
    secret: tuple[str, ...]
    author: str = ""
    """The field of each record that names who wrote it (author trust)."""

    def to_list(self) -> list[Any]:
        return [
            self.name,
            self.effect,
            list(self.third_party),
            dict(self.kinds),
            list(self.secret),
            self.author,
        ]

    @classmethod
    def from_list(cls, data: Sequence[Any]) -> ResultSource:
        return cls(str(data[0]), data[1], tuple(data[2]), dict(data[3]), tuple(data[4]), data[5])

    @classmethod
    def of(cls, tool: Tool, author: str = "") -> ResultSource:
        return cls(tool.name, tool.effect, tuple(tool.third_party), tool.kinds, tool.secret, author)


SETTLING: dict[int, asyncio.Future[None]] = {}


async def settle_store(store: ProvenanceStore, member: Member | None = None) -> None:
    """Read queued results in a worker thread into a scratch store, then merge it here (on
    the event loop), until the queue is empty."""
    while store.data.get("pending"):
        batch = list(store.data["pending"])
        scratch = await run_in_worker(_read_batch, batch=batch, member=member)
        store.merge(scratch)
        del store.data["pending"][: len(batch)]
    store.data.pop("pending", None)


def _read_batch(batch: list[list[Any]], member: Member | None) -> ProvenanceStore:
    scratch = ProvenanceStore({})
    for item in batch:
        record_result(scratch, ResultSource.from_list(item[:-1]), str(item[-1]), member)
    return scratch


def record_result(
    store: ProvenanceStore,
    tool: ResultSource,
    content: str,
    member: Member | None = None,
) -> None:
    """Record one result of ``tool`` (see the module doc); ``member(author)`` says whether
    a record's author (the field named by ``tool.author``) belongs to the organisation."""
    source = tool.name
    doc = _json(content)
    secret = tuple(p.strip(".") for p in tool.secret) or (
        ("*",) if tool.effect == "credential" else ()
    )
    if secret:
        if doc is None:  # plain text: all of it, when the tool reads credentials
            if tool.effect == "credential":
                store.add_secret(content, source)
                store.add_text(content, "credential", source)
                return
        else:
            for path, text, _ in _fields(doc, ""):
                where = f"{source}: {path}" if path else source
                if _under(path, secret):
                    store.add_secret(text, where)
                    store.add_text(text, "credential", where)
                elif tool.effect == "credential":
                    store.add_value(text, "system", where)
            if tool.effect == "credential":
                return
    mark = read_label(content)
    if mark is not None:
        inner = _label_content(content)
        origin = "system" if mark.trusted else "third_party"
        store.add_text(inner, origin, mark.source)  # type: ignore[arg-type]
        if origin == "third_party":
            _flag(store, inner, mark.source)
        return
    if doc is None or not isinstance(doc, dict | list):
        if tool.effect is None or tool.third_party:  # undeclared or unreadable: fail closed
            if tool.effect is not None and not any(p in ("*", "") for p in tool.third_party):
                _warn(store, source, content)
            store.add_text(content, "third_party", source)
            _flag(store, content, source)
        else:
            store.add_value(content, "system", source)
            kind = tool.kinds.get("") or tool.kinds.get("*")
            for line in content.splitlines()[:_MAX_LINES]:  # a plain-text list: each item
                item = line.strip()
                if item and item != content.strip():
                    store.add_value(item, "system", source)
                if item and kind:
                    store.add_seen(f"obj:{kind}:{compact(item)}", "system", source)
        return
    paths = tuple(p.strip(".") for p in tool.third_party)
    later: list[tuple[str, str]] = []
    trusted_author = _author_check(tool.author, member)
    for path, text, by_member in _fields(doc, "", trusted_author):
        if secret and _under(path, secret):
            continue
        if by_member and tool.effect is not None:
            where = f"{source}: {path} (written by a member)" if path else source
            store.add_text(text, "application", where)
        elif tool.effect is None or _under(path, paths):
            later.append((path, text))
        else:
            store.add_value(text, "system", f"{source}: {path}" if path else source)
    record_objects(
        store,
        doc,
        lambda path: tool.effect is not None and not _under(path, paths),
        tool.kinds,
        source,
    )
    for path, text in later:  # system fields first: the same result names them first
        where = f"{source}: {path}" if path else source
        store.add_text(text, "third_party", where)
        _flag(store, text, where)


def _json(content: str) -> Any:
    try:
        doc = json.loads(content)
    except ValueError:
        return None
    return doc if isinstance(doc, dict | list) else None


def _warn(store: ProvenanceStore, source: str, content: str) -> None:
    """Field provenance could not be read (not JSON, or JSON cut by the result cap): the
    whole result counts as third-party text, and the approver and the log are told."""
    cut = "characters omitted" in content[-200:]
    why = "was cut by the result cap" if cut else "is not JSON"
    text = (
        f"{source}: the result {why}, so its fields cannot be told apart; "
        "all of it counts as third-party text"
    )
    warnings = store.data.setdefault("warnings", [])
    if text not in warnings and len(warnings) < 50:
        warnings.append(text)
        _LOG.warning(text)


def _label_content(content: str) -> str:
    try:
        inner = json.loads(content)["content"]
    except (ValueError, KeyError, TypeError):
        return content  # an unreadable label: the whole text, untrusted
    return inner if isinstance(inner, str) else json.dumps(inner, ensure_ascii=False)


def _author_check(field: str, member: Member | None) -> Callable[[Mapping[str, Any]], bool]:
    def check(record: Mapping[str, Any]) -> bool:
        author = record.get(field) if field else None
        if member is None or not isinstance(author, str) or not author.strip():
            return False
        try:
            return member(author) is True
        except Exception:  # a failing registry trusts no one
            return False

    return check


def _fields(
    node: Any,
    path: str,
    by_member: Callable[[Mapping[str, Any]], bool] | None = None,
    inside: bool = False,
) -> Iterator[tuple[str, str, bool]]:
    """Each string or number of ``node`` with its dotted path, and whether it lies in a
    record written by a member (``by_member``)."""
    if isinstance(node, Mapping):
        inside = inside or (by_member is not None and by_member(node))
        for k, v in node.items():
            if str(k).strip():
                yield path, str(k), inside  # a key is a value too (of the mapping's field)
            yield from _fields(v, f"{path}.{k}" if path else str(k), by_member, inside)
    elif isinstance(node, list):
        for v in node:
            yield from _fields(v, path, by_member, inside)
    elif isinstance(node, str):
        if node.strip():
            yield path, node, inside
    elif isinstance(node, int | float) and not isinstance(node, bool):
        yield path, str(node), inside


def _under(path: str, paths: tuple[str, ...]) -> bool:
    return any(p in ("*", "") or path == p or path.startswith(p + ".") for p in paths)


def instructed(store: ProvenanceStore) -> bool:
    """Whether third-party text read in this run holds instruction-like phrases (by kind;
    entries saved before flags had kinds fall back to the reason)."""
    return any(
        entry[3] in INSTRUCTION_KINDS if len(entry) > 3 else entry[2] in INSTRUCTION_REASONS
        for entry in store.data.get("flags", ())
    )


def _flag(store: ProvenanceStore, text: str, source: str) -> None:
    flags = store.data.setdefault("flags", [])
    for f in flag_instructions(text):
        if len(flags) >= _MAX_FLAGS:
            return
        entry = [source, f.quote[:200], f.reason, f.kind]
        if entry not in flags:
            flags.append(entry)
