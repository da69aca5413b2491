"""Structured output: one model call, one validated Python object.

::

    class Tri(BaseModel):
        motif: Literal["Suivi", "Remboursement", "Autre"]

    tri = await extract(client, ticket_text, Tri, instructions="Classe le ticket.")
    tri.output.motif, tri.usage

:func:`extract` asks the client for a reply valid against the type's JSON schema
(``ChatOptions.output_schema``; each adapter uses its provider's own mechanism), then
validates the reply into the type with pydantic. A reply that is not JSON or fails
validation gets one re-ask (``reasks``) that shows the model what was wrong; after that, or
on refusal, truncation or context overflow, :class:`~tether.errors.StructuredOutputError`
is raised with ``kind`` saying which. Nothing half-parsed is ever returned.

Types: pydantic models, dataclasses, ``TypedDict``, ``Literal``, ``Enum`` and anything else
pydantic's ``TypeAdapter`` reads. A type whose schema is not an object (``Literal``, an
enum, a list) is sent wrapped as ``{"value": ...}`` (providers want an object at the root)
and unwrapped before validation.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from tether.clients import ChatClient, ChatOptions, ChatResponse, OutputSchema
from tether.errors import ContextWindowExceeded, OutputFailureKind, StructuredOutputError
from tether.messages import Message, Usage

if TYPE_CHECKING:
    from pydantic import TypeAdapter

T = TypeVar("T")

WRAP_KEY = "value"
"""The property holding a non-object output inside the object sent to providers."""
MAX_PROBLEMS = 10
"""Validation problems shown in a re-ask (the rest are counted)."""
REASK = (
    "Your reply could not be used: {problems}. Reply again with only the corrected JSON "
    "object, valid against the required schema, and nothing else."
)

_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]+")
_FENCE = re.compile(r"^```(?:json)?\s*\n(.*)\n```$", re.DOTALL)


class InvalidOutput(ValueError):
    """A reply that is not a valid value of the output type; ``problems`` says why."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True, slots=True, eq=False)
class OutputType(Generic[T]):
    """A Python type as the schema a provider is asked for, and the reply's validator.

    Build one with :meth:`of` (cached per type). :meth:`parse` returns a validated value or
    raises :class:`InvalidOutput`; it never returns anything partly read.
    """

    type: Any
    schema: OutputSchema
    wrapped: bool
    adapter: TypeAdapter[T]
    drop_nulls: frozenset[str] = frozenset()
    """Optional top-level properties that do not accept ``null``: a ``null`` sent for one
    (strict modes make optional properties nullable) means absent, so the default applies."""

    @staticmethod
    def of(tp: Any, *, name: str | None = None) -> OutputType[Any]:
        """The output type for ``tp`` (a pydantic model, dataclass, Literal, enum...)."""
        try:
            return _output_type(tp, name)
        except TypeError:  # an unhashable annotation: build it uncached
            return _output_type.__wrapped__(tp, name)

    def parse(self, text: str) -> T:
        """The reply's text as a validated value; raises :class:`InvalidOutput`."""
        from pydantic import ValidationError

        value = _decode(text)
        if self.wrapped:
            if isinstance(value, dict) and set(value) == {WRAP_KEY}:
                value = value[WRAP_KEY]
        elif isinstance(value, dict) and self.drop_nulls:
            value = {k: v for k, v in value.items() if not (v is None and k in self.drop_nulls)}
        try:
            return self.adapter.validate_json(json.dumps(value), strict=True)
        except ValidationError as exc:
            raise InvalidOutput(_problems(exc, self.wrapped)) from None


@functools.lru_cache(maxsize=256)
def _output_type(tp: Any, name: str | None) -> OutputType[Any]:
    from pydantic import TypeAdapter

    adapter: TypeAdapter[Any] = TypeAdapter(tp)
    schema = adapter.json_schema()
    wrapped = schema.get("type") != "object" or "properties" not in schema
    if wrapped:
        defs = schema.pop("$defs", None)
        schema = {
            "type": "object",
            "properties": {WRAP_KEY: schema},
            "required": [WRAP_KEY],
            "additionalProperties": False,
        }
        if defs:
            schema["$defs"] = defs
    label = name or (tp.__name__ if isinstance(tp, type) else "output")
    label = _NAME_BAD.sub("_", str(label)).strip("_")[:64] or "output"
    description = schema.get("description") if not wrapped else None
    required = set(schema.get("required") or ())
    optional = {
        k
        for k, prop in (schema.get("properties") or {}).items()
        if k not in required and not _accepts_null(prop, schema.get("$defs") or {})
    }
    return OutputType(
        tp,
        OutputSchema(label, schema, description if isinstance(description, str) else None),
        wrapped,
        adapter,
        frozenset(optional),
    )


def output_schema(tp: Any, *, name: str | None = None) -> OutputSchema:
    """The :class:`~tether.clients.OutputSchema` asked of a provider for ``tp``."""
    return OutputType.of(tp, name=name).schema


def _accepts_null(prop: Any, defs: Mapping[str, Any]) -> bool:
    if not isinstance(prop, Mapping):
        return False
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _accepts_null(defs.get(ref[len("#/$defs/") :]), defs)
    kind = prop.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if None in (prop.get("enum") or ()):
        return True
    return any(_accepts_null(v, defs) for v in prop.get("anyOf") or prop.get("oneOf") or ())


def _decode(text: str) -> Any:
    stripped = text.strip()
    if not stripped:
        raise InvalidOutput(["the reply is empty; it must be one JSON object"])
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    try:
        return json.loads(stripped)
    except json.JSONDecodeError as exc:
        raise InvalidOutput(
            [f"the reply is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"]
        ) from None


def _problems(exc: Any, wrapped: bool) -> list[str]:
    lines = []
    for err in exc.errors(include_url=False, include_input=False):
        loc = [str(p) for p in err["loc"]]
        where = ".".join(loc) or ("value" if wrapped else "(the object)")
        lines.append(f"{where}: {err['msg']}")
    if len(lines) > MAX_PROBLEMS:
        lines = [*lines[:MAX_PROBLEMS], f"and {len(lines) - MAX_PROBLEMS} more problem(s)"]
    return lines


# --- one call ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Extraction(Generic[T]):
    """A validated object and what it cost."""

    output: T
    """The validated value, an instance of the requested type."""
    usage: Usage
    """Tokens of every request made (the re-ask included)."""
    attempts: int = 1
    """Requests made: 1, or 2 after a re-ask."""
    transcript: tuple[Message, ...] = field(default=())
    """The messages sent and received, the final reply last."""
    response: ChatResponse | None = None
    """The provider's last response."""


EXTRACT_MAX_OUTPUT_TOKENS = 4096
"""The output cap :func:`extract` asks for when ``options.max_output_tokens`` is not set:
a server without a default cap (llama.cpp's) otherwise writes until its context is full."""


@overload
async def extract(
    client: ChatClient,
    messages: str | Sequence[Message],
    output_type: type[T] | OutputType[T],
    *,
    instructions: str | None = None,
    options: ChatOptions | None = None,
    reasks: int = 1,
) -> Extraction[T]: ...


@overload
async def extract(
    client: ChatClient,
    messages: str | Sequence[Message],
    output_type: Any,
    *,
    instructions: str | None = None,
    options: ChatOptions | None = None,
    reasks: int = 1,
) -> Extraction[Any]: ...


async def extract(
    client: ChatClient,
    messages: str | Sequence[Message],
    output_type: Any,
    *,
    instructions: str | None = None,
    options: ChatOptions | None = None,
    reasks: int = 1,
) -> Extraction[Any]:
    """One structured reply from ``client``, validated into ``output_type``.

    ``messages`` is a history or a user text; ``instructions`` (or ``options.instructions``)
    go apart as usual; no tools are sent. Without ``options.max_output_tokens`` the request
    asks for at most :data:`EXTRACT_MAX_OUTPUT_TOKENS`. A reply that is not a valid value gets up to
    ``reasks`` re-asks showing the validation problems. Raises
    :class:`~tether.errors.StructuredOutputError` when no valid value comes back (``kind``:
    ``invalid``, ``refused``, ``truncated``, ``context_exceeded``); other provider failures
    raise :class:`~tether.errors.ProviderError` as usual.
    """
    if reasks < 0:
        raise ValueError("reasks must be 0 or more")
    out: OutputType[Any] = (
        output_type if isinstance(output_type, OutputType) else OutputType.of(output_type)
    )
    base = options or ChatOptions()
    if instructions is not None:
        base = replace(base, instructions=instructions)
    request = replace(base, output_schema=out.schema)
    if request.max_output_tokens is None:
        request = replace(request, max_output_tokens=EXTRACT_MAX_OUTPUT_TOKENS)
    history = [Message.user(messages)] if isinstance(messages, str) else list(messages)
    usage = Usage()
    attempt = 0
    while True:
        attempt += 1
        try:
            response = await client.complete(history, (), request)
        except ContextWindowExceeded as exc:
            raise StructuredOutputError(
                "context_exceeded",
                f"the request does not fit in the model's context window ({exc}); "
                "shorten the input",
                usage=usage,
                attempts=attempt,
                transcript=tuple(history),
            ) from exc
        usage = usage + response.usage
        text = response.message.text
        reply = Message.assistant(text) if text else None
        failed = failure_of(response)
        if failed is not None:
            kind, why = failed
            raise StructuredOutputError(
                kind,
                why,
                text=text,
                usage=usage,
                attempts=attempt,
                transcript=(*history, *([reply] if reply else [])),
            )
        try:
            value = out.parse(text)
        except InvalidOutput as bad:
            if attempt > reasks:
                raise StructuredOutputError(
                    "invalid",
                    f"the model's reply is not a valid {out.schema.name} after {attempt} "
                    f"attempt(s): {bad}",
                    problems=bad.problems,
                    text=text,
                    usage=usage,
                    attempts=attempt,
                    transcript=(*history, *([reply] if reply else [])),
                ) from None
            if reply is not None:
                history.append(reply)
            history.append(Message.user(reask_text(bad.problems)))
            continue
        assert reply is not None  # parse() rejects an empty reply
        return Extraction(value, usage, attempt, (*history, reply), response)


def failure_of(response: ChatResponse) -> tuple[OutputFailureKind, str] | None:
    """The typed failure a response stands for (refusal, truncation, full context), or
    ``None`` when its text may be read."""
    stop = response.stop_reason
    if stop.truncated:
        return "truncated", (
            f"the reply hit the output token limit ({stop.raw}) before the object was "
            "complete; raise max_output_tokens"
        )
    if stop.refused:
        return "refused", f"the model refused to answer ({stop.raw})"
    if stop.context_exceeded:
        return "context_exceeded", "the model's context window filled up; shorten the input"
    return None


def reask_text(problems: Sequence[str]) -> str:
    """The user message that re-asks for a valid object, naming each problem."""
    return REASK.format(problems="; ".join(problems))
