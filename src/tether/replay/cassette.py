"""Cassettes: a run's model traffic and tool results as one JSON document, secrets removed.

A cassette is a list of interactions, in the order they happened:

- ``request``: the turn, the SHA-256 digest of what was sent (instructions, options, tool
  specs and history, after redaction), and the history itself stored incrementally: how many
  messages of the previous request's history it ``keep``s, then the ``new`` ones; the tool
  specs and options only when they changed;
- ``response``: the reply (messages, stop reason, usage, model), or ``error``: the typed
  provider failure that came instead;
- ``tool``: a tool call's id, name, arguments and what the tool returned (or raised).

Everything written is redacted first (:class:`Redactor`): the values of the environment's
keys, tokens and passwords, values the app marks secret, ``Authorization``-like fields and
anything shaped like an API key. Digests are computed on the redacted form, so a replay
whose environment holds other keys still matches.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.clients import ChatOptions, ChatResponse
from tether.errors import ConfigError, ContextWindowExceeded, ProviderError
from tether.messages import (
    Message,
    message_from_dict,
    message_to_dict,
    stop_reason_from_dict,
    stop_reason_to_dict,
    usage_from_dict,
    usage_to_dict,
)
from tether.replay.redaction import REDACTED as REDACTED
from tether.replay.redaction import SECRET_NAME as SECRET_NAME
from tether.replay.redaction import SENSITIVE_FIELD as SENSITIVE_FIELD
from tether.replay.redaction import Redactor as Redactor
from tether.tools import ToolSpec

FORMAT = "tether-cassette"
VERSION = 1


# --- what one request carried -------------------------------------------------------------


def spec_to_dict(spec: ToolSpec) -> dict[str, Any]:
    """A tool spec as JSON."""
    return {
        "name": spec.name,
        "description": spec.description,
        "parameters": dict(spec.parameters),
        "strict": spec.strict,
    }


def spec_from_dict(data: Mapping[str, Any]) -> ToolSpec:
    """Inverse of :func:`spec_to_dict`."""
    return ToolSpec(
        str(data["name"]),
        str(data.get("description", "")),
        dict(data.get("parameters") or {}),
        bool(data.get("strict", False)),
    )


def options_to_dict(options: ChatOptions) -> dict[str, Any]:
    """The request options as JSON (``extra`` included, redacted later like the rest)."""
    out: dict[str, Any] = {
        "instructions": options.instructions,
        "max_output_tokens": options.max_output_tokens,
        "temperature": options.temperature,
        "model": options.model,
        "extra": dict(options.extra),
    }
    schema = options.output_schema
    out["output_schema"] = (
        None
        if schema is None
        else {"name": schema.name, "schema": dict(schema.schema), "description": schema.description}
    )
    return out


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """A request in redacted JSON form, and its digest."""

    history: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    options: dict[str, Any]
    digest: str


def request_record(
    redactor: Redactor,
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
    options: ChatOptions,
) -> RequestRecord:
    """The redacted form of one request and the digest of all of it."""
    history = redactor.value([message_to_dict(m) for m in messages])
    specs = redactor.value([spec_to_dict(t) for t in tools])
    opts = redactor.value(options_to_dict(options))
    return RequestRecord(history, specs, opts, digest({"o": opts, "t": specs, "h": history}))


def digest(value: Any) -> str:
    """SHA-256 of the canonical JSON of ``value``."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# --- responses and errors -------------------------------------------------------------------


def response_to_dict(response: ChatResponse) -> dict[str, Any]:
    """A response as JSON (the provider's raw body is not kept)."""
    return {
        "messages": [message_to_dict(m) for m in response.messages],
        "stop_reason": stop_reason_to_dict(response.stop_reason),
        "usage": usage_to_dict(response.usage),
        "model": response.model,
    }


def response_from_dict(data: Mapping[str, Any]) -> ChatResponse:
    """Inverse of :func:`response_to_dict`."""
    return ChatResponse(
        tuple(message_from_dict(m) for m in data["messages"]),
        stop_reason_from_dict(data["stop_reason"]),
        usage_from_dict(data.get("usage") or {}),
        data.get("model"),
    )


def error_to_dict(error: ProviderError) -> dict[str, Any]:
    """A provider failure as JSON."""
    return {
        "context_exceeded": isinstance(error, ContextWindowExceeded),
        "kind": error.kind,
        "status": error.status,
        "message": str(error),
    }


def error_from_dict(data: Mapping[str, Any]) -> ProviderError:
    """Inverse of :func:`error_to_dict`."""
    if data.get("context_exceeded"):
        return ContextWindowExceeded(str(data.get("message", "")))
    return ProviderError(
        str(data.get("message", "")), kind=data.get("kind", "other"), status=data.get("status")
    )


# --- the document ---------------------------------------------------------------------------


@dataclass
class Cassette:
    """A recorded run: ``meta`` (free JSON), ``interactions`` in order, the ``outcome``."""

    interactions: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    outcome: dict[str, Any] | None = None

    def requests(self) -> list[dict[str, Any]]:
        """The request interactions, in order."""
        return [i for i in self.interactions if i["type"] == "request"]

    def to_json(self) -> str:
        """The cassette as indented JSON text."""
        document = {
            "format": FORMAT,
            "version": VERSION,
            "meta": self.meta,
            "interactions": self.interactions,
            "outcome": self.outcome,
        }
        return json.dumps(document, ensure_ascii=False, indent=1, default=str) + "\n"

    def save(self, path: str | Path, redactor: Redactor | None = None) -> Path:
        """Write the cassette (redacted once more as a whole), replacing the file atomically."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = self.to_json()
        if redactor is not None:
            text = json.dumps(redactor.value(json.loads(text)), ensure_ascii=False, indent=1)
        temporary = target.with_name(target.name + ".tmp")
        temporary.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
        temporary.replace(target)
        return target

    @classmethod
    def from_json(cls, text: str, source: str = "the cassette") -> Cassette:
        """Read a cassette; raises :class:`~tether.errors.ConfigError` on a bad document."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{source} is not JSON ({exc}); record it again") from exc
        except RecursionError as exc:
            raise ConfigError(f"{source} is nested too deeply; record it again") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ConfigError(f"{source} is not a tether cassette; record it again")
        if data.get("version") != VERSION:
            raise ConfigError(
                f"{source} has cassette version {data.get('version')!r}, this tether reads "
                f"{VERSION}; record it again"
            )
        interactions = data.get("interactions")
        if not isinstance(interactions, list) or not all(
            isinstance(i, dict) and i.get("type") in ("request", "response", "error", "tool")
            for i in interactions
        ):
            raise ConfigError(f"{source} has malformed interactions; record it again")
        for key in ("meta", "outcome"):
            if not isinstance(data.get(key) or {}, dict):
                raise ConfigError(f"{source} has a malformed {key!r}; record it again")
        return cls(interactions, dict(data.get("meta") or {}), data.get("outcome"))

    @classmethod
    def load(cls, path: str | Path) -> Cassette:
        """Read the cassette at ``path``."""
        target = Path(path)
        try:
            text = target.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read the cassette {target}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{target} is not a text file; record it again") from exc
        return cls.from_json(text, str(target))
