"""JSON schemas as llguidance grammars for the embedded model, checked before use.

llama.cpp in ``xllamacpp`` is built with llguidance: a ``grammar`` that starts with
``%llguidance`` constrains decoding to a JSON schema with full regular-expression
``pattern`` support (``\\d``, ``\\w``, classes, alternation). Two things are ours:

- **compact JSON** (``x-guidance`` ``whitespace_flexible: false``): the reply has no
  newlines or indentation to spend tokens on; a tool call costs about a third of the tokens;
- **bounded values**: an object with ``properties`` and no ``additionalProperties`` is
  closed (a small model otherwise invents keys until its token cap), and a number without
  bounds gets at most :data:`NUMBER_DECIMALS` decimals and :data:`NUMBER_LIMIT` in
  magnitude (otherwise ``10.0000000000000001000...`` runs to the cap);
- **a check before use**: llama.cpp logs an invalid grammar and then samples *without* it,
  which would silently drop the constraint. Each grammar is validated with the
  ``llguidance`` package first; one that fails only because of ``pattern`` (look-around,
  back-references) is rebuilt without patterns (the tool still validates its arguments),
  anything else is a :class:`~tether.errors.ConfigError` that says why.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from typing import Any

from tether.errors import ConfigError

COMPACT = {"whitespace_flexible": False}
"""llguidance's JSON options: no free whitespace between tokens of the JSON syntax."""

NUMBER_DECIMALS = 6
"""Most decimals the embedded model may write in a number whose schema sets no step."""
NUMBER_LIMIT = 10**15
"""Largest magnitude of a number whose schema sets no bound (15 digits, exact in a float)."""

_CACHE: dict[str, str] = {}
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 256


def grammar_for(schema: Mapping[str, Any]) -> str:
    """The llguidance grammar constraining a reply to ``schema`` (cached per schema)."""
    key = json.dumps(schema, sort_keys=True, ensure_ascii=False)
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
    if cached is not None:
        return cached
    if not isinstance(schema, Mapping):
        raise ConfigError("a JSON schema for the local model must be a JSON object")
    grammar = _lark(schema)
    error = validate(grammar)
    if error:
        without = _lark(_without_patterns(schema))
        if validate(without):
            raise ConfigError(f"the JSON schema cannot constrain the local model: {error}")
        grammar = without
    with _CACHE_LOCK:
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.clear()
        _CACHE[key] = grammar
    return grammar


def validate(grammar: str) -> str:
    """llguidance's first error for ``grammar``, or ``""`` when it is usable."""
    try:
        from llguidance import LLMatcher
    except ImportError as exc:
        raise ConfigError(
            f"the local model needs llguidance, which cannot be imported ({exc}); "
            "install tether's local extra: uv add 'tether[local]' or pip install llguidance"
        ) from exc
    is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar)
    if not is_error:
        return ""
    if not messages:
        return "invalid grammar"
    first = messages[0].split("\n")[0]
    return re.sub(r"^at \d+\(\d+\): ", "", first).strip()


def bounded(node: Any) -> Any:
    """``node`` with every open object closed and every number given a digit bound."""
    if isinstance(node, list):
        return [bounded(v) for v in node]
    if not isinstance(node, Mapping):
        return node
    out = {k: _bounded_child(k, v) for k, v in node.items()}
    is_open = "additionalProperties" not in out and "patternProperties" not in out
    if isinstance(out.get("properties"), Mapping) and is_open:
        out["additionalProperties"] = False
    types = out.get("type")
    kinds = set(types) if isinstance(types, list) else {types}
    if kinds & {"number", "integer"}:
        if not any(k in out for k in ("minimum", "exclusiveMinimum")):
            out["minimum"] = -NUMBER_LIMIT
        if not any(k in out for k in ("maximum", "exclusiveMaximum")):
            out["maximum"] = NUMBER_LIMIT
        if "number" in kinds and "multipleOf" not in out:
            out["multipleOf"] = 10.0**-NUMBER_DECIMALS
    return out


def _bounded_child(key: str, value: Any) -> Any:
    if key in ("properties", "$defs", "definitions", "patternProperties"):
        if isinstance(value, Mapping):
            return {name: bounded(sub) for name, sub in value.items()}
        return value
    if key in ("enum", "const", "examples", "default", "required", "x-guidance"):
        return value
    return bounded(value)


def _lark(schema: Mapping[str, Any]) -> str:
    options = dict(schema.get("x-guidance") or {})
    compact = {**bounded(schema), "x-guidance": {**COMPACT, **options}}
    return "%llguidance {}\nstart: %json " + json.dumps(compact, ensure_ascii=False)


def _without_patterns(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {
            k: _without_patterns(v)
            for k, v in node.items()
            if not (k == "pattern" and isinstance(v, str))
        }
    if isinstance(node, list):
        return [_without_patterns(v) for v in node]
    return node
