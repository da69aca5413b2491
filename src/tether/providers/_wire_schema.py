"""Is a JSON schema from the wire usable? Checked before any work starts on a request."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

_BASE = "urn:tether:request-schema"
MAX_DEPTH = 64
"""Deeper schemas are refused: no tool needs them, and checking them would recurse."""


def schema_problem(schema: Any) -> str:
    """Why ``schema`` cannot be used (one sentence), or ``""`` when it can: it must be a
    JSON object, valid against the JSON Schema meta-schema, and every ``$ref`` in it must
    point inside it (nothing is fetched)."""
    if not isinstance(schema, dict):
        return f"a schema must be a JSON object, not {type(schema).__name__}"
    if _depth(schema) > MAX_DEPTH:
        return f"the schema is nested more than {MAX_DEPTH} levels deep"
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except RecursionError:
        return "the schema refers to itself too deeply to be checked"
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        return f"{exc.message}" + (f" (at {where})" if where else "")
    resource = DRAFT202012.create_resource(schema)
    resolver = Registry().with_resource(_BASE, resource).resolver(base_uri=_BASE)
    for ref in _refs(schema):
        if not ref.startswith("#"):
            return f"$ref {ref!r} points outside the schema; put the definition in $defs"
        try:
            resolver.lookup(ref)
        except Unresolvable:
            return f"$ref {ref!r} points to nothing in the schema"
    return ""


def _depth(node: Any) -> int:
    deepest = 0
    stack = [(node, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            break
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, dict | list):
            stack.extend((child, level + 1) for child in children)
    return deepest


def _refs(node: Any) -> Iterator[str]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                yield ref
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
