"""Tools: a name, a description and a JSON schema, plus the code that runs the call.

``@tool`` turns a sync or async function into a :class:`FunctionTool`: the schema comes
from the signature (pydantic), the description from the docstring, each parameter's
description from ``Annotated[T, "..."]``, ``Annotated[T, Field(...)]`` or the docstring's
parameter section. Arguments are validated before the function runs; a failed validation
becomes :class:`~tether.errors.InvalidArguments` naming each bad field.

A parameter annotated ``RunContext[Deps]`` is injected (dependencies, run id, the call and
its stable id) and never appears in the schema.

pydantic is imported on first use, so ``import tether`` stays fast.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeAlias, TypeVar, overload

from tether._workers import run_in_worker
from tether.errors import InvalidArguments, ToolDefinitionError
from tether.messages import ToolCall, Usage
from tether.rulings import ALLOW, Ruling
from tether.serial_keys import SerialSpec, serial_argument

if TYPE_CHECKING:
    from pydantic import BaseModel

DepsT = TypeVar("DepsT")
NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

Effect: TypeAlias = Literal["read", "write", "communicate", "money", "destructive", "credential"]
"""What a tool does to the world: reads, writes, communicates outward, moves money,
destroys, or reads credentials. Policies decide on it."""
ArgRole: TypeAlias = Literal["counterparty", "object", "content", "credential"]
"""What an argument is: who the action reaches (recipient, URL, account, phone), the thing
acted on, free text sent out, or a secret."""
Serial: TypeAlias = SerialSpec
"""What ``serial=`` accepts (:mod:`tether.serial_keys`): ``True``, an argument name shared
by every tool declaring it, a :class:`~tether.serial_keys.Serial` resource, or ``None``."""
_NO_ROLES: Mapping[str, ArgRole] = {}
_NO_KINDS: Mapping[str, str] = {}


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model sees of a tool: three texts (and the strict flag)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    strict: bool = False


@dataclass(slots=True)
class RunContext(Generic[DepsT]):
    """What a tool may know about the run that calls it.

    ``call.id`` is stable for the life of the run (also across a resume): use it as the
    idempotency key of an irreversible action.
    """

    deps: DepsT
    run_id: str = ""
    call: ToolCall | None = None
    turn: int = 0
    usage: Usage = field(default_factory=Usage)
    usage_sink: Callable[[Usage], None] | None = None
    memo: dict[str, Any] = field(default_factory=dict)
    """Per-run data shared by every call and the run's policy; JSON-ready, saved in the run
    state and restored on resume."""
    in_thread: bool = False
    """True while the call's sync function runs in its worker thread (set by the tool)."""

    @property
    def idempotency_key(self) -> str:
        """``run_id:call_id``: the same for a call in every resume and retry of its run;
        pass it to the service an irreversible tool calls, which must do a key once."""
        return f"{self.run_id}:{self.call.id if self.call is not None else ''}"

    def report_usage(self, usage: Usage) -> None:
        """Add tokens spent inside the tool (a sub-agent, a summariser) to the run's usage,
        so that the run's budget and result account for them."""
        if self.usage_sink is not None:
            self.usage_sink(usage)


class Tool:
    """Base class of tools: a :class:`ToolSpec` and an async ``invoke``.

    ``invoke`` returns the text for the model. It raises
    :class:`~tether.errors.ToolFailure` (shown to the model as is) or any other exception
    (shown as a generic error unless detailed errors are enabled).
    """

    spec: ToolSpec
    requires_approval: bool = False
    effect: Effect | None = None
    """Declared effect class (``None``: undeclared)."""
    roles: Mapping[str, ArgRole] = _NO_ROLES
    """Declared role of each argument that has one."""
    third_party: tuple[str, ...] = ()
    """Dotted paths of result fields written by a third party (``"body"``,
    ``"messages.*.text"``); ``("*",)``: the whole result."""
    serial: Serial = None
    """Whether calls of this tool may overlap (see :data:`Serial`)."""
    kinds: Mapping[str, str] = _NO_KINDS
    """The kind of object each object argument names (``{"file_id": "file"}``), and the kind
    of id each result field holds (``{"events.id": "event"}``, by dotted path; ``""``: each
    line of a plain-text result); an id is matched only against ids of its kind. Fields
    named ``<kind>_id`` need no entry."""
    secret: tuple[str, ...] = ()
    """Dotted paths of result fields that hold secrets (a card number, a code); none of
    them ever leaves in an argument. A ``credential`` tool without any: its whole result."""

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.spec.name

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        """Validate ``arguments``, run the tool and return its result as text."""
        raise NotImplementedError

    def needs_approval(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> bool:
        """Whether this call waits for a human decision (the loop then defers it).

        By default ``requires_approval``; a wrapper can decide per call, for instance when
        the arguments carry values that came from untrusted content.
        """
        return self.requires_approval

    def approval_context(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> Any:
        """What a human approver needs beyond the call itself (JSON-ready); none by default."""
        return None

    async def ruling(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> Ruling:
        """This tool's own ruling on a call, before it runs: ``ask`` when it needs approval,
        else ``allow``. Wrappers add their rules (an argument policy denies)."""
        if self.needs_approval(arguments, ctx):
            return Ruling("ask", "this tool needs a human's approval", "requires_approval")
        return ALLOW


class DelegatingTool(Tool):
    """A tool that wraps another and forwards everything; override one method."""

    def __init__(self, inner: Tool) -> None:
        self.inner = inner
        self.spec = inner.spec
        self.requires_approval = inner.requires_approval
        self.effect = inner.effect
        self.roles = inner.roles
        self.third_party = inner.third_party
        self.serial = inner.serial
        self.kinds = inner.kinds
        self.secret = inner.secret

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        return await self.inner.invoke(arguments, ctx)

    def needs_approval(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> bool:
        return self.requires_approval or self.inner.needs_approval(arguments, ctx)

    def approval_context(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> Any:
        return self.inner.approval_context(arguments, ctx)

    async def ruling(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> Ruling:
        inner = await self.inner.ruling(arguments, ctx)
        if inner.action == "allow" and self.needs_approval(arguments, ctx):
            return await Tool.ruling(self, arguments, ctx)
        return inner


def to_text(value: Any) -> str:
    """Serialise a tool's return value for the model: strings as they are, anything else
    (pydantic models, dataclasses, dicts, lists, numbers, None) as compact JSON."""
    if isinstance(value, str):
        return value
    from pydantic_core import to_json

    return to_json(value).decode()


class FunctionTool(Tool):
    """A tool made from a Python function by :func:`tool`."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        strict: bool = False,
        requires_approval: bool = False,
        thread: bool = True,
        effect: Effect | None = None,
        roles: Mapping[str, ArgRole] | None = None,
        third_party: Sequence[str] = (),
        serial: Serial = None,
        kinds: Mapping[str, str] | None = None,
        secret: Sequence[str] = (),
    ) -> None:
        self.func = func
        self.requires_approval = requires_approval
        self._is_async = inspect.iscoroutinefunction(func)
        self._thread = thread
        tool_name = name or func.__name__
        if not NAME_RE.match(tool_name):
            raise ToolDefinitionError(
                f"tool name {tool_name!r} must be 1-64 letters, digits, '_' or '-'"
            )
        from pydantic import ValidationError

        self._validation_error = ValidationError
        model, ctx_param, docs = _arguments_model(func, tool_name)
        self._model = model
        self._validate = model.__pydantic_validator__.validate_python
        self._ctx_param = ctx_param
        text = description if description is not None else docs
        if not text:
            raise ToolDefinitionError(
                f"tool {tool_name!r} has no description: add a docstring or description="
            )
        schema = _clean_schema(model.model_json_schema())
        if strict:
            schema = strict_schema(schema)
        self.spec = ToolSpec(tool_name, text, schema, strict)
        declare(
            self,
            effect=effect,
            roles=roles,
            third_party=third_party,
            serial=serial,
            kinds=kinds,
            secret=secret,
        )

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        return to_text(await self.run(arguments, ctx))

    async def run(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> Any:
        """Validate ``arguments`` and call the function; return its value unserialised
        (what a workflow step gets)."""
        try:
            parsed = self._validate(arguments)
        except self._validation_error as exc:
            raise InvalidArguments(self.spec.name, _describe_errors(exc)) from None
        kwargs = dict(parsed.__dict__)
        if self._ctx_param:
            kwargs[self._ctx_param] = ctx
        return await call_function(self.func, ctx, self._is_async, self._thread, **kwargs)

    async def __call__(self, **kwargs: Any) -> Any:
        """Call the underlying function directly (tests, scripts)."""
        value = self.func(**kwargs)
        return await value if inspect.isawaitable(value) else value


async def call_function(
    func: Callable[..., Any],
    ctx: RunContext[Any],
    is_async: bool,
    thread: bool,
    /,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """Call a tool's function: awaited when async, else on a worker thread (``thread``) or
    inline. While it runs on its thread ``ctx.in_thread`` is set, so an interrupted run can
    tell a call still running there (abandoned) from one that stopped."""
    if is_async:
        return await func(*args, **kwargs)
    if thread:
        return await run_in_worker(_in_thread, func=func, ctx=ctx, args=args, kwargs=kwargs)
    return func(*args, **kwargs)


def _in_thread(
    func: Callable[..., Any], ctx: RunContext[Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    ctx.in_thread = True
    try:
        return func(*args, **kwargs)
    finally:
        ctx.in_thread = False


def declare(
    tool: Tool,
    *,
    effect: Effect | None = None,
    roles: Mapping[str, ArgRole] | None = None,
    third_party: Sequence[str] = (),
    serial: Serial = None,
    kinds: Mapping[str, str] | None = None,
    secret: Sequence[str] = (),
) -> Tool:
    """Set ``tool``'s declarations (effect, argument roles, third-party result fields,
    serial execution, object kinds, secret result fields), checking that each named
    argument exists; returns the tool."""
    params = set(tool.spec.parameters.get("properties", {}))
    if effect is not None and effect not in typing.get_args(Effect):
        raise ToolDefinitionError(f"tool {tool.name}: unknown effect {effect!r}")
    for arg, role in (roles or {}).items():
        if arg not in params:
            raise ToolDefinitionError(f"tool {tool.name}: role given for unknown argument {arg!r}")
        if role not in typing.get_args(ArgRole):
            raise ToolDefinitionError(f"tool {tool.name}: unknown role {role!r} for {arg!r}")
    argument = serial_argument(serial)
    if argument is not None and argument not in params:
        raise ToolDefinitionError(f"tool {tool.name}: serial names unknown argument {argument!r}")
    tool.effect = effect
    tool.roles = dict(roles or {})
    tool.third_party = tuple(third_party)
    tool.serial = serial or None
    tool.kinds = dict(kinds or {})
    tool.secret = tuple(secret)
    return tool


F = TypeVar("F", bound=Callable[..., Any])


@overload
def tool(func: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = False,
    requires_approval: bool = False,
    thread: bool = True,
    effect: Effect | None = None,
    roles: Mapping[str, ArgRole] | None = None,
    third_party: Sequence[str] = (),
    serial: Serial = None,
    kinds: Mapping[str, str] | None = None,
    secret: Sequence[str] = (),
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    strict: bool = False,
    requires_approval: bool = False,
    thread: bool = True,
    effect: Effect | None = None,
    roles: Mapping[str, ArgRole] | None = None,
    third_party: Sequence[str] = (),
    serial: Serial = None,
    kinds: Mapping[str, str] | None = None,
    secret: Sequence[str] = (),
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a function into a tool. Use bare (``@tool``) or with options.

    ``thread=True`` (default) runs a sync function in a worker thread so it cannot block
    the event loop (``thread=False`` runs it inline: cheaper, for quick functions that never
    block); ``strict=True`` asks providers to constrain generation to the schema.
    ``effect``, ``roles`` and ``third_party`` declare what the tool does and what its
    arguments and result fields are, for policies (``kinds``: the kind of object each
    object argument or id field names; ``secret``: result fields that never leave);
    ``serial`` keeps calls from overlapping.
    """

    def make(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f,
            name=name,
            description=description,
            strict=strict,
            requires_approval=requires_approval,
            thread=thread,
            effect=effect,
            roles=roles,
            third_party=third_party,
            serial=serial,
            kinds=kinds,
            secret=secret,
        )

    return make(func) if func is not None else make


# --- schema from a signature ------------------------------------------------------------


def _is_context(annotation: Any) -> bool:
    origin = typing.get_origin(annotation) or annotation
    return origin is RunContext


def _arguments_model(
    func: Callable[..., Any], tool_name: str
) -> tuple[type[BaseModel], str | None, str]:
    from docstring_parser import parse as parse_docstring
    from pydantic import ConfigDict, Field, create_model
    from pydantic.fields import FieldInfo

    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(f"cannot read the type hints of {tool_name}: {exc}") from exc
    doc = parse_docstring(inspect.getdoc(func) or "")
    param_docs = {p.arg_name: p.description or "" for p in doc.params}
    description = _description(
        doc.short_description, doc.long_description, doc.blank_after_short_description
    )
    fields: dict[str, Any] = {}
    ctx_param: str | None = None
    for pname, param in inspect.signature(func).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(f"tool {tool_name}: *args and **kwargs are not supported")
        annotation = hints.get(pname, Any)
        if _is_context(annotation):
            ctx_param = pname
            continue
        text = param_docs.get(pname)
        if typing.get_origin(annotation) is typing.Annotated:
            base, *extras = typing.get_args(annotation)
            infos = [e for e in extras if isinstance(e, FieldInfo)]
            texts = [e for e in extras if isinstance(e, str)]
            if texts:
                text = " ".join(texts)
            annotation = typing.Annotated[(base, *infos)] if infos else base
        default = ... if param.default is param.empty else param.default
        fields[pname] = (annotation, Field(default, description=text) if text else default)
    model = create_model(
        f"{tool_name}_arguments",
        __config__=ConfigDict(extra="forbid"),
        **fields,
    )
    return model, ctx_param, description


def _description(short: str | None, long: str | None, blank_after_short: bool) -> str:
    """The docstring's text as one description: a summary that wraps over several lines
    (docstring_parser keeps only its first line as the short description) is one
    paragraph; the paragraphs after it keep their breaks."""
    if not long:
        return (short or "").strip()
    if not short or blank_after_short:
        return "\n\n".join(s for s in (short, long) if s).strip()
    rest, _, after = long.partition("\n\n")
    summary = " ".join(line.strip() for line in (short, *rest.splitlines()) if line.strip())
    return "\n\n".join(s for s in (summary, after.strip()) if s)


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's generated titles; keep everything that carries meaning."""

    def walk(node: Any, in_properties: bool = False) -> Any:
        if isinstance(node, dict):
            return {
                k: walk(v, k == "properties")
                for k, v in node.items()
                if not (k == "title" and not in_properties and isinstance(v, str))
            }
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    cleaned: dict[str, Any] = walk(schema)
    cleaned.setdefault("properties", {})
    return cleaned


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The strict-mode form of a schema: every object closed, every property required."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: walk(v) for k, v in node.items()}
            if out.get("type") == "object":
                out["additionalProperties"] = False
                out["required"] = list(out.get("properties", {}))
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    result: dict[str, Any] = walk(dict(schema))
    return result


def _describe_errors(exc: Any) -> list[str]:
    lines = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        lines.append(f"{where}: {err['msg']}")
    return lines


# --- lint ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LintFinding:
    """One weakness in a tool's definition."""

    tool: str
    severity: str  # "error" | "hint"
    message: str

    def __str__(self) -> str:
        return f"{self.tool}: {self.severity}: {self.message}"


_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")


def count_sentences(text: str) -> int:
    """Sentences in ``text``, counted by their closing punctuation."""
    count = len(_SENTENCE_END.findall(text.strip()))
    if text.strip() and not _SENTENCE_END.search(text.strip()[-1:] + " "):
        count += 1  # a last sentence without its full stop
    return count


_TYPED = frozenset(
    {"type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const", "properties", "items"}
)
"""Schema keys that say what a parameter holds; a parameter with none of them is untyped."""


def lint(tools: Sequence[Tool]) -> list[LintFinding]:
    """Flag what makes a model call a tool badly: a description under three sentences
    (say when to use it, what it does not do), an untyped or undocumented parameter, a free-form
    string without ``pattern``/``enum`` (which constrained decoding and validation use)."""
    findings: list[LintFinding] = []
    for t in tools:
        spec = t.spec
        n = count_sentences(spec.description)
        if n < 3:
            findings.append(
                LintFinding(
                    spec.name,
                    "error",
                    f"description has {n} sentence(s); write at least 3: what it does, "
                    "when to use it, what it does not do",
                )
            )
        for pname, prop in spec.parameters.get("properties", {}).items():
            if not (_TYPED & prop.keys()):
                findings.append(
                    LintFinding(
                        spec.name,
                        "error",
                        f"parameter {pname!r} has no type: annotate it (its schema is empty, "
                        "so the model is told nothing and any value passes validation)",
                    )
                )
            if not prop.get("description"):
                findings.append(
                    LintFinding(spec.name, "error", f"parameter {pname!r} is undocumented")
                )
            if prop.get("type") == "string" and not (
                {"pattern", "enum", "format", "const"} & prop.keys()
            ):
                findings.append(
                    LintFinding(
                        spec.name,
                        "hint",
                        f"parameter {pname!r} is a free string: add a pattern or enum "
                        "so it can be validated and constrained",
                    )
                )
    return findings


ToolFunc = Callable[..., Any] | Callable[..., Awaitable[Any]]
