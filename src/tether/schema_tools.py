"""Tools from an existing JSON schema: a name, a description, a schema and a callable.

Applications already hold schemas (OpenAPI operations, other frameworks' tools, a database
layer). :func:`tool_from_schema` makes a tool of one, validated like ``@tool``: each field
that breaks the schema is named in the error the model reads. A schema that does not say
whether other arguments are allowed is closed (``additionalProperties: false``), as
``@tool``'s are: an unknown argument is named to the model with the ones the tool takes.
The validator is compiled once, so a tool built at start-up serves every run.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tether.errors import InvalidArguments, ToolDefinitionError
from tether.tools import (
    NAME_RE,
    ArgRole,
    Effect,
    RunContext,
    Serial,
    Tool,
    ToolSpec,
    call_function,
    declare,
    strict_schema,
    to_text,
)

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

__all__ = [
    "MAX_REPORTED_PROBLEMS",
    "SchemaTool",
    "compile_schema",
    "schema_problems",
    "tool_from_schema",
]

MAX_REPORTED_PROBLEMS = 10
SchemaFunction = Callable[[dict[str, Any], RunContext[Any]], Any]


def compile_schema(name: str, given: Mapping[str, Any], what: str = "tool") -> Validator:
    """A validator for ``schema`` (its declared draft, else 2020-12, formats checked);
    raises :class:`~tether.errors.ToolDefinitionError` when the schema itself is invalid."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    if not isinstance(given, Mapping) or given.get("type", "object") != "object":
        raise ToolDefinitionError(
            f"the input schema of {what} {name!r} must be a JSON object schema"
        )
    schema = dict(given)
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        raise ToolDefinitionError(
            f"the input schema of {what} {name!r} is not valid JSON Schema: {exc.message}"
        ) from None
    validator: Validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    return validator


def schema_problems(validator: Validator, arguments: Mapping[str, Any]) -> list[str]:
    """One line per field of ``arguments`` that breaks the schema (at most ten), in the
    same ``field: message`` form as ``@tool``'s errors."""
    errors = sorted(
        validator.iter_errors(dict(arguments)), key=lambda e: [str(p) for p in e.absolute_path]
    )
    return [
        f"{'.'.join(str(p) for p in e.absolute_path) or '(arguments)'}: {_message(e)}"
        for e in errors[:MAX_REPORTED_PROBLEMS]
    ]


def _message(error: Any) -> str:
    """jsonschema's message, or for unknown arguments which ones and what is expected."""
    if error.validator != "additionalProperties" or not isinstance(error.instance, Mapping):
        return str(error.message)
    known = dict(error.schema.get("properties") or {})
    extra = sorted(k for k in error.instance if k not in known)
    takes = ", ".join(known) or "no arguments"
    return f"unknown argument(s) {', '.join(map(repr, extra))}; this takes {takes}"


def closed(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with ``additionalProperties: false`` unless it says otherwise."""
    out = dict(schema)
    if not {"additionalProperties", "patternProperties", "unevaluatedProperties"} & out.keys():
        out["additionalProperties"] = False
    return out


class SchemaTool(Tool):
    """A tool whose arguments are checked against a JSON schema before ``func`` runs.

    ``func(arguments, ctx)`` gets the validated arguments as a dict; it may be sync (run in
    a worker thread unless ``thread=False``) or async, and returns text or any
    JSON-serialisable value.
    """

    def __init__(
        self,
        name: str,
        description: str,
        schema: Mapping[str, Any],
        func: SchemaFunction,
        *,
        strict: bool = False,
        requires_approval: bool = False,
        thread: bool = True,
        effect: Effect | None = None,
        roles: Mapping[str, ArgRole] | None = None,
        third_party: Sequence[str] = (),
        serial: Serial = None,
    ) -> None:
        if not NAME_RE.match(name):
            raise ToolDefinitionError(
                f"tool name {name!r} must be 1-64 letters, digits, '_' or '-'"
            )
        if not description.strip():
            raise ToolDefinitionError(f"tool {name!r} needs a description")
        schema = closed(schema) if isinstance(schema, Mapping) else schema
        self._validator = compile_schema(name, schema)
        parameters = dict(schema)
        parameters.setdefault("properties", {})
        self.spec = ToolSpec(
            name, description, strict_schema(parameters) if strict else parameters, strict
        )
        self.func = func
        self.requires_approval = requires_approval
        self._is_async = inspect.iscoroutinefunction(func)
        self._thread = thread
        declare(self, effect=effect, roles=roles, third_party=third_party, serial=serial)

    def check_arguments(self, arguments: Mapping[str, Any]) -> None:
        """Raise :class:`~tether.errors.InvalidArguments` naming each bad field."""
        problems = schema_problems(self._validator, arguments)
        if problems:
            raise InvalidArguments(self.name, problems)

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        self.check_arguments(arguments)
        args = dict(arguments)
        return to_text(await call_function(self.func, ctx, self._is_async, self._thread, args, ctx))


def tool_from_schema(
    name: str,
    description: str,
    schema: Mapping[str, Any],
    func: SchemaFunction,
    **options: Any,
) -> SchemaTool:
    """A tool from a name, a description, a JSON schema and ``func(arguments, ctx)``;
    ``options`` are those of ``@tool`` (``strict``, ``requires_approval``, ``thread``,
    ``effect``, ``roles``, ``third_party``, ``serial``)."""
    return SchemaTool(name, description, schema, func, **options)
