"""Provider-neutral messages: plain, frozen, tagged values that round-trip through JSON.

A history is a sequence of :class:`Message`. Roles are ``user``, ``assistant`` and ``tool``
(the message that carries the results of the previous assistant message's calls). The
instructions travel in the request options, not in the history. Provider-only data rides in
``metadata`` and never in a wire dict: wire formats exist only inside adapters.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, get_args

MAX_JSON_DEPTH = 64
"""Deepest nesting of containers accepted in a call's arguments; deeper is malformed."""

TOO_DEEP = "<arguments nested too deeply>"

Role = Literal["user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset(get_args(Role))

_EMPTY: Mapping[str, Any] = {}


def within_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests lists and dicts no deeper than ``limit`` (read without
    recursion, so a hostile value cannot exhaust the stack)."""
    if isinstance(value, dict) and not any(
        isinstance(v, Mapping | list | tuple) for v in value.values()
    ):
        return limit > 0  # the common case: a flat object of scalars
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Mapping):
            children: Iterable[Any] = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth >= limit:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


@dataclass(frozen=True, slots=True)
class Text:
    """A span of text."""

    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A request by the model to call a tool.

    ``id`` pairs the call with its result and is stable for the life of the run, so an
    irreversible tool can use it as its idempotency key. When the model's arguments were
    not valid JSON, ``arguments`` is empty and ``raw_arguments`` keeps the text as sent.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    raw_arguments: str | None = None
    kind: Literal["tool_call"] = "tool_call"

    @classmethod
    def from_json(cls, id: str, name: str, text: str) -> ToolCall:
        """Build a call from a JSON text of arguments, keeping the text if it is malformed."""
        try:
            value = json.loads(text) if text.strip() else {}
        except (json.JSONDecodeError, RecursionError):
            return cls(id=id, name=name, arguments={}, raw_arguments=text)
        if not isinstance(value, dict) or not within_depth(value):
            return cls(id=id, name=name, arguments={}, raw_arguments=text)
        return cls(id=id, name=name, arguments=value)

    @property
    def malformed(self) -> bool:
        """True when the model's arguments could not be read as a JSON object."""
        return self.raw_arguments is not None

    def arguments_json(self) -> str:
        """The arguments as compact JSON text (the raw text when it was malformed)."""
        if self.raw_arguments is not None:
            return self.raw_arguments
        try:
            return json.dumps(self.arguments, separators=(",", ":"), ensure_ascii=False)
        except RecursionError:  # the loop turns such a call into a malformed one
            return TOO_DEEP


ResultStatus = Literal["ok", "error", "denied", "blocked", "interrupted", "abandoned", "not_run"]
"""What happened to a call, beyond the text the model reads:

- ``ok``: it ran and returned;
- ``error``: it ran or was attempted and failed (the tool raised, invalid or malformed
  arguments, unknown tool, a tool timeout); only these count toward
  ``Limits.max_consecutive_errors``;
- ``denied``: a human refused it; ``blocked``: a policy refused it before anything ran
  (a refusal is a decision, not a failure);
- ``interrupted``: it started, then the run was cancelled or hit its wall-time limit; it may
  or may not have taken effect;
- ``abandoned``: a sync tool still running in its worker thread when the run ended; it may
  still take effect;
- ``not_run``: it provably never started (a truncated or refused reply, a run stopped first).
"""
RESULT_STATUSES: frozenset[str] = frozenset(get_args(ResultStatus))


@dataclass(frozen=True, slots=True)
class ToolResult:
    """The result of one tool call, paired with it by ``call_id``.

    ``is_error`` is what providers see; ``status`` says what happened (see
    :data:`ResultStatus`). Either may be given: an error result defaults to ``error``, and
    any status but ``ok`` is an error.
    """

    call_id: str
    content: str
    is_error: bool = False
    status: ResultStatus = "ok"
    kind: Literal["tool_result"] = "tool_result"

    def __post_init__(self) -> None:
        if self.status == "ok":
            if self.is_error:
                object.__setattr__(self, "status", "error")
        elif not self.is_error:
            object.__setattr__(self, "is_error", True)


Part: TypeAlias = Text | ToolCall | ToolResult


@dataclass(frozen=True, slots=True)
class Message:
    """One message of a history: a role and its parts."""

    role: Role
    parts: tuple[Part, ...]
    metadata: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message holding one text part."""
        return cls("user", (Text(text),))

    @classmethod
    def assistant(cls, *parts: Part | str) -> Message:
        """An assistant message; strings become text parts."""
        return cls("assistant", tuple(Text(p) if isinstance(p, str) else p for p in parts))

    @classmethod
    def results(cls, results: Iterable[ToolResult]) -> Message:
        """The tool message answering the previous assistant message's calls."""
        return cls("tool", tuple(results))

    @property
    def text(self) -> str:
        """The concatenated text parts."""
        return "".join(p.text for p in self.parts if isinstance(p, Text))

    @property
    def tool_calls(self) -> list[ToolCall]:
        """The tool calls of this message, in order."""
        return [p for p in self.parts if isinstance(p, ToolCall)]

    @property
    def tool_results(self) -> list[ToolResult]:
        """The tool results of this message, in order."""
        return [p for p in self.parts if isinstance(p, ToolResult)]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one or more requests; ``+`` adds them up."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    requests: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.requests + other.requests,
        )

    @property
    def total_tokens(self) -> int:
        """Input (including cached) plus output tokens."""
        return (
            self.input_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
            + self.output_tokens
        )


StopKind = Literal[
    # Anthropic Messages
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop_sequence",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
    # OpenAI / Microsoft.Extensions.AI
    "stop",
    "length",
    "tool_calls",
    "content_filter",
    # the provider said nothing, or something not documented
    "missing",
    "unknown",
]
STOP_KINDS: frozenset[str] = frozenset(get_args(StopKind))
_TRUNCATION = frozenset({"max_tokens", "length"})
_REFUSAL = frozenset({"refusal", "content_filter"})


@dataclass(frozen=True, slots=True)
class StopReason:
    """Why the provider says it stopped. ``raw`` keeps the provider's own value.

    The loop never decides on this alone (it decides on content); it uses it only to
    recognise truncation, refusal, pause and context overflow.
    """

    value: StopKind
    raw: str | None = None

    @classmethod
    def parse(cls, raw: str | None) -> StopReason:
        """Map a provider's raw value; ``None`` is ``missing``, anything else undocumented
        is ``unknown`` with the raw value kept."""
        if raw is None or raw == "":
            return cls("missing", raw)
        if raw in STOP_KINDS and raw not in ("missing", "unknown"):
            return cls(raw, raw)  # type: ignore[arg-type]
        return cls("unknown", raw)

    @property
    def truncated(self) -> bool:
        """The output hit its token ceiling: text and any tool call may be cut."""
        return self.value in _TRUNCATION

    @property
    def refused(self) -> bool:
        """The model or a filter refused to answer."""
        return self.value in _REFUSAL

    @property
    def paused(self) -> bool:
        """A server-side tool loop paused; send the history back to continue."""
        return self.value == "pause_turn"

    @property
    def context_exceeded(self) -> bool:
        """The model's context window filled up."""
        return self.value == "model_context_window_exceeded"


# --- JSON round trip -------------------------------------------------------------------


def part_to_dict(part: Part) -> dict[str, Any]:
    """A JSON-ready dict for one part, tagged by ``kind``."""
    if isinstance(part, Text):
        return {"kind": "text", "text": part.text}
    if isinstance(part, ToolCall):
        d: dict[str, Any] = {
            "kind": "tool_call",
            "id": part.id,
            "name": part.name,
            "arguments": dict(part.arguments),
        }
        if part.raw_arguments is not None:
            d["raw_arguments"] = part.raw_arguments
        return d
    d = {
        "kind": "tool_result",
        "call_id": part.call_id,
        "content": part.content,
        "is_error": part.is_error,
    }
    if part.status not in ("ok", "error"):
        d["status"] = part.status
    return d


def part_from_dict(data: Mapping[str, Any]) -> Part:
    """Inverse of :func:`part_to_dict`; raises ``ValueError`` on an unknown kind or shape."""
    if not isinstance(data, Mapping):
        raise ValueError(f"a message part must be an object, not {type(data).__name__}")
    kind = data.get("kind")
    if kind == "text":
        return Text(str(data["text"]))
    if kind == "tool_call":
        arguments = data.get("arguments") or {}
        raw = data.get("raw_arguments")
        if not isinstance(arguments, Mapping) or not within_depth(arguments):
            raise ValueError("a tool call's arguments must be a JSON object of bounded depth")
        if raw is not None and not isinstance(raw, str):
            raise ValueError("a tool call's raw_arguments must be text")
        return ToolCall(
            id=str(data["id"]), name=str(data["name"]), arguments=dict(arguments), raw_arguments=raw
        )
    if kind == "tool_result":
        status = data.get("status", "ok")
        if status not in RESULT_STATUSES:
            raise ValueError(f"unknown tool result status: {status!r}")
        return ToolResult(
            call_id=str(data["call_id"]),
            content=str(data["content"]),
            is_error=bool(data.get("is_error", False)),
            status=status,
        )
    raise ValueError(f"unknown message part kind: {kind!r}")


def message_to_dict(message: Message) -> dict[str, Any]:
    """A JSON-ready dict for a message."""
    d: dict[str, Any] = {
        "role": message.role,
        "parts": [part_to_dict(p) for p in message.parts],
    }
    if message.metadata:
        d["metadata"] = dict(message.metadata)
    return d


def message_from_dict(data: Mapping[str, Any]) -> Message:
    """Inverse of :func:`message_to_dict`; raises ``ValueError`` on a bad role or part."""
    if not isinstance(data, Mapping):
        raise ValueError(f"a message must be an object, not {type(data).__name__}")
    role = data.get("role")
    if role not in ROLES:
        raise ValueError(f"unknown message role: {role!r}")
    parts = data.get("parts", ())
    metadata = data.get("metadata") or {}
    if not isinstance(parts, list | tuple) or not isinstance(metadata, Mapping):
        raise ValueError("a message needs a list of parts and an object of metadata")
    return Message(role, tuple(part_from_dict(p) for p in parts), dict(metadata))


def usage_to_dict(usage: Usage) -> dict[str, int]:
    """A JSON-ready dict for usage."""
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "requests": usage.requests,
    }


def usage_from_dict(data: Mapping[str, Any]) -> Usage:
    """Inverse of :func:`usage_to_dict`; raises ``ValueError`` on a bad shape."""
    if not isinstance(data, Mapping):
        raise ValueError(f"usage must be an object, not {type(data).__name__}")
    return Usage(**{k: int(data.get(k, 0)) for k in usage_to_dict(Usage())})


def stop_reason_to_dict(reason: StopReason) -> dict[str, str | None]:
    """A JSON-ready dict for a stop reason."""
    return {"value": reason.value, "raw": reason.raw}


def stop_reason_from_dict(data: Mapping[str, Any]) -> StopReason:
    """Inverse of :func:`stop_reason_to_dict`."""
    value = data.get("value")
    if value not in STOP_KINDS:
        raise ValueError(f"unknown stop reason: {value!r}")
    return StopReason(value, data.get("raw"))


def dumps_history(history: Iterable[Message]) -> str:
    """A history as JSON text."""
    return json.dumps([message_to_dict(m) for m in history], ensure_ascii=False)


def loads_history(text: str) -> list[Message]:
    """Inverse of :func:`dumps_history`."""
    return [message_from_dict(m) for m in json.loads(text)]
