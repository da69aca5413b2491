"""Workflows in plain Python: the code takes the path, the model fills in one blank at a time.

A workflow is an async function that receives a :class:`Workflow` and calls its steps:
``await wf.extract(...)`` (one structured model call), ``await wf.call(tool, **args)`` (a
tool or any function) and ``async with wf.step("name")`` (a span around your own code).
There is no graph to declare: branches are ``if``/``match``, loops are ``for``.

::

    async def triage(wf: Workflow, ticket: Ticket) -> str:
        tri = await wf.extract(ticket.text, Tri, instructions="Classe le ticket.")
        if tri.motif is Motif.SUIVI:
            order = await wf.call(read_order, numero=ticket.order)
            return f"Votre commande {ticket.order} est {order['status']}."
        return "Transmis a un conseiller."

    result = await run_workflow(client, partial(triage, ticket=ticket), limits=Limits(max_turns=2))

What makes it production-grade, as for agents: one :class:`~tether.limits.Limits` bounds the
whole (``max_turns`` counts model requests, re-asks included; tokens, cost and wall time as
usual), reaching a bound ends it with a typed outcome, and every step is an OpenTelemetry
span under one ``invoke_workflow {name}`` span (model requests are ``chat`` spans, tool steps
``execute_tool`` spans, as in :mod:`tether.observe`). A step's failure is an exception inside
the function (catch it to take another path); one left uncaught ends the workflow with the
matching typed outcome. Exceptions that are not tether's (a bug in your code) propagate.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Literal, Protocol, TypeVar, overload

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from tether import _genai as genai
from tether import observe
from tether.clients import ChatClient, ChatOptions, ChatResponse, DelegatingChatClient, StreamChunk
from tether.errors import (
    ContextWindowExceeded,
    ProviderError,
    StructuredOutputError,
    TetherError,
    WorkflowNotCompleted,
)
from tether.limits import Budget, Limits
from tether.messages import Message, ToolCall, Usage
from tether.outcomes import Outcome
from tether.structured import OutputType, extract
from tether.tools import FunctionTool, RunContext, Tool, ToolSpec, to_text

T = TypeVar("T")
StepKind = Literal["extract", "tool", "step"]
WORKFLOW_OPERATION = "invoke_workflow"
STEP_NAME = "tether.step.name"
STEP_KIND = "tether.step.kind"
STEP_INDEX = "tether.step.index"


class ToolTape(Protocol):
    """Where tool steps are recorded or checked (record and replay, :mod:`tether.replay`)."""

    def tool_step(self, call: ToolCall, result: str, is_error: bool, turn: int) -> None:
        """One tool step ran with ``call.arguments`` and gave ``result`` (after ``turn``
        model requests)."""


@dataclass(frozen=True, slots=True)
class Step:
    """One step that ran: what, how long, what it cost, how it ended."""

    index: int
    name: str
    kind: StepKind
    seconds: float
    usage: Usage = field(default_factory=Usage)
    error: str | None = None
    """``None`` when the step succeeded, else the error's kind or class."""


@dataclass(frozen=True, slots=True)
class WorkflowResult(Generic[T]):
    """How a workflow ended, its value, what it cost and the steps it took."""

    outcome: Outcome
    value: T | None
    usage: Usage
    calls: int
    """Model requests made (re-asks included)."""
    steps: tuple[Step, ...]
    run_id: str = ""

    @property
    def output(self) -> T:
        """The workflow's return value; raises :class:`WorkflowNotCompleted` unless it
        completed."""
        if self.outcome.kind != "completed":
            raise WorkflowNotCompleted(self, self.outcome.kind, self.outcome.reason)
        return self.value  # type: ignore[return-value]


class _LimitReached(Exception):
    """Raised inside a workflow when a step would cross a bound."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.reason)
        self.outcome = outcome


class Workflow:
    """The handle a workflow function receives; its methods are the steps.

    ``deps`` is what tools receive in their :class:`~tether.tools.RunContext`; ``usage`` and
    ``calls`` are the running totals; ``steps`` the steps so far.
    """

    def __init__(
        self,
        client: ChatClient,
        *,
        limits: Limits,
        deps: Any = None,
        run_id: str = "",
        tape: ToolTape | None = None,
        tracer: trace.Tracer | None = None,
        capture_content: bool = False,
    ) -> None:
        self.limits = limits
        self.deps = deps
        self.run_id = run_id
        self.usage = Usage()
        self.calls = 0
        self.steps: list[Step] = []
        self.stopped: Outcome | None = None
        """Set when a bound stopped a step; the workflow then ends with this outcome."""
        self.budget = Budget(limits)
        self._tape = tape
        self._tracer = tracer or trace.get_tracer(genai.TRACER_NAME)
        self._capture = capture_content
        self.client: ChatClient = _Metered(client, self)

    # --- steps --------------------------------------------------------------------------

    @overload
    async def extract(
        self,
        messages: str | Sequence[Message],
        output_type: type[T] | OutputType[T],
        *,
        instructions: str | None = None,
        options: ChatOptions | None = None,
        reasks: int = 1,
        name: str | None = None,
    ) -> T: ...

    @overload
    async def extract(
        self,
        messages: str | Sequence[Message],
        output_type: Any,
        *,
        instructions: str | None = None,
        options: ChatOptions | None = None,
        reasks: int = 1,
        name: str | None = None,
    ) -> Any: ...

    async def extract(
        self,
        messages: str | Sequence[Message],
        output_type: Any,
        *,
        instructions: str | None = None,
        options: ChatOptions | None = None,
        reasks: int = 1,
        name: str | None = None,
    ) -> Any:
        """One structured model call (:func:`tether.structured.extract`): the validated
        value. ``str`` as the type asks for free text, still bounded and typed."""
        out: OutputType[Any] = (
            output_type if isinstance(output_type, OutputType) else OutputType.of(output_type)
        )
        async with self._step(name or out.schema.name, "extract"):
            result = await extract(
                self.client,
                messages,
                out,
                instructions=instructions,
                options=options,
                reasks=reasks,
            )
            return result.output

    async def call(
        self,
        tool: Tool | Callable[..., Any],
        /,
        *,
        step_name: str | None = None,
        **arguments: Any,
    ) -> Any:
        """Run a tool step: a :class:`~tether.tools.FunctionTool` (arguments validated, its
        function's value returned), any other :class:`~tether.tools.Tool` (its text), or a
        plain function (sync ones run in a worker thread). The step is named after the tool
        or function unless ``step_name`` is given."""
        label = step_name or (tool.name if isinstance(tool, Tool) else _name_of(tool))
        index = len(self.steps) + 1
        call = ToolCall(f"step_{index}", label, dict(arguments))
        attributes: dict[str, Any] = {
            genai.OPERATION: "execute_tool",
            genai.TOOL_NAME: label,
            genai.TOOL_TYPE: "function",
            genai.TOOL_CALL_ID: call.id,
        }
        if isinstance(tool, Tool):
            attributes[genai.TOOL_DESCRIPTION] = tool.spec.description
        if self._capture:
            attributes[genai.TOOL_CALL_ARGUMENTS] = genai.to_json(dict(arguments))
        async with self._step(label, "tool", f"execute_tool {label}", attributes) as span:
            ctx = RunContext(self.deps, self.run_id, call, self.calls, self.usage, self._count)
            try:
                value = await _run_tool(tool, arguments, ctx)
            except Exception as exc:
                if self._tape is not None:
                    self._tape.tool_step(call, _failure_text(exc), True, self.calls)
                raise
            text = to_text(value)
            if self._tape is not None:
                self._tape.tool_step(call, text, False, self.calls)
            if self._capture:
                span.set_attribute(genai.TOOL_CALL_RESULT, text)
            return value

    @contextlib.asynccontextmanager
    async def step(self, name: str) -> AsyncIterator[Span]:
        """A span around your own code, counted as a step; the bounds are checked first."""
        async with self._step(name, "step") as span:
            yield span

    # --- bookkeeping --------------------------------------------------------------------

    def check(self) -> None:
        """Raise if a bound is reached (the workflow then ends with that outcome)."""
        if self.stopped is not None:
            raise _LimitReached(self.stopped)
        exhausted = self.budget.exhausted(self.usage)
        if exhausted is not None:
            self._stop(Outcome("budget_exceeded", f"{exhausted} reached", exhausted))

    def _before_request(self) -> None:
        self.check()
        if self.calls >= self.limits.max_turns:
            self._stop(
                Outcome("turn_cap", f"{self.calls} model requests made", "max_turns"),
            )
        self.calls += 1

    def _stop(self, outcome: Outcome) -> None:
        self.stopped = outcome
        raise _LimitReached(outcome)

    def _add(self, usage: Usage, truncated: bool = False) -> None:
        """Count a reply's usage; past a token or cost limit the workflow ends there."""
        self.usage = self.usage + usage
        over = self.budget.overshoot(self.usage, truncated=truncated)
        if over is not None:
            self._stop(Outcome("budget_exceeded", over[1], over[0]))

    def _count(self, usage: Usage) -> None:
        """Count usage a tool reports (a sub-agent's); the next step checks the bounds."""
        self.usage = self.usage + usage

    def _capped(self, options: ChatOptions) -> ChatOptions:
        """``options`` asking for no more output than the token budget has left."""
        allowance = self.budget.output_allowance(self.usage)
        asked = options.max_output_tokens
        if allowance is None or (asked is not None and asked <= allowance):
            return options
        return replace(options, max_output_tokens=allowance)

    @contextlib.asynccontextmanager
    async def _step(
        self,
        name: str,
        kind: StepKind,
        span_name: str | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[Span]:
        self.check()
        index = len(self.steps) + 1
        attrs = {STEP_NAME: name, STEP_KIND: kind, STEP_INDEX: index, **(attributes or {})}
        started, usage_before = time.perf_counter(), self.usage
        error: str | None = None
        with self._tracer.start_as_current_span(
            span_name or f"{kind} {name}",
            kind=SpanKind.INTERNAL,
            attributes=attrs,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield span
            except BaseException as exc:
                error = _error_kind(exc)
                genai.record_error(span, exc)
                raise
            finally:
                spent = _minus(self.usage, usage_before)
                if kind == "extract":
                    genai.set_usage(span, spent)
                seconds = time.perf_counter() - started
                self.steps.append(Step(index, name, kind, seconds, spent, error))


class _Metered(DelegatingChatClient):
    """Checks the workflow's bounds before each request and adds up what it cost."""

    def __init__(self, inner: ChatClient, workflow: Workflow) -> None:
        super().__init__(inner)
        self._workflow = workflow

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        self._workflow._before_request()
        options = self._workflow._capped(options)
        try:
            response = await self.inner.complete(messages, tools, options)
        except ProviderError as exc:
            if exc.usage is not None:  # a reply the adapter rejected was still paid for
                self._workflow._count(exc.usage)
            raise
        self._workflow._add(response.usage, response.stop_reason.truncated)
        return response

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        from tether.clients import ResponseDone

        self._workflow._before_request()
        options = self._workflow._capped(options)
        async for chunk in self.inner.stream(messages, tools, options):
            if isinstance(chunk, ResponseDone):
                self._workflow._add(chunk.response.usage, chunk.response.stop_reason.truncated)
            yield chunk


# --- running one ------------------------------------------------------------------------


async def run_workflow(
    client: ChatClient,
    body: Callable[[Workflow], Awaitable[T]],
    *,
    name: str | None = None,
    limits: Limits | None = None,
    deps: Any = None,
    run_id: str | None = None,
    tape: ToolTape | None = None,
    capture_content: bool = False,
    tracer_provider: TracerProvider | None = None,
) -> WorkflowResult[T]:
    """Run ``body(workflow)`` within ``limits`` and return a typed result.

    ``body`` is your async function with its other arguments bound (``functools.partial``
    or a lambda). Uncaught tether failures become outcomes: a bound reached ->
    ``turn_cap`` / ``budget_exceeded``; structured output refused / truncated / context
    full / invalid -> ``refused`` / ``truncated`` / ``context_exceeded`` / ``failed``
    (``error="invalid_output"``); a provider failure -> ``failed`` with its kind; another
    tether error (a tool's :class:`~tether.errors.ToolFailure`) -> ``failed``. Cancelling
    the awaiting task propagates ``CancelledError``.
    """
    limits = limits or Limits()
    label = name or _name_of(body)
    run_id = run_id or secrets.token_hex(16)
    tracer = trace.get_tracer(genai.TRACER_NAME, tracer_provider=tracer_provider)
    traced = client
    if not isinstance(client, observe.TracingChatClient):
        traced = observe.TracingChatClient(
            client, capture_content=capture_content, tracer_provider=tracer_provider
        )
    wf = Workflow(
        traced,
        limits=limits,
        deps=deps,
        run_id=run_id,
        tape=tape,
        tracer=tracer,
        capture_content=capture_content,
    )
    attributes: dict[str, Any] = {
        genai.OPERATION: WORKFLOW_OPERATION,
        genai.PROVIDER: observe._provider_name(client),
        genai.WORKFLOW_NAME: label,
        genai.CONVERSATION_ID: run_id,
    }
    with tracer.start_as_current_span(
        f"{WORKFLOW_OPERATION} {label}",
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        value: Any = None
        try:
            outcome, value = await _drive(wf, body)
        except BaseException as exc:
            genai.record_error(span, exc)
            raise
        span.set_attribute(genai.OUTCOME, outcome.kind)
        genai.set_usage(span, wf.usage)
        if outcome.kind != "completed":
            span.set_attribute(genai.ERROR_TYPE, outcome.kind)
            span.set_status(Status(StatusCode.ERROR, outcome.reason))
    return WorkflowResult(outcome, value, wf.usage, wf.calls, tuple(wf.steps), run_id)


async def _drive(wf: Workflow, body: Callable[[Workflow], Awaitable[T]]) -> tuple[Outcome, Any]:
    remaining = wf.budget.remaining_seconds()
    try:
        async with asyncio.timeout(None if remaining is None else max(remaining, 0.0)) as cm:
            value = await body(wf)
    except _LimitReached as stop:
        return wf.stopped or stop.outcome, None
    except TimeoutError:
        if not cm.expired():
            raise
        return Outcome("budget_exceeded", "wall-time limit reached", "max_wall_seconds"), None
    except TetherError as exc:
        return wf.stopped or outcome_of(exc), None
    if wf.stopped is not None:  # the body caught the stop and went on: the bound still wins
        return wf.stopped, None
    return Outcome("completed", "the workflow returned"), value


def outcome_of(exc: TetherError) -> Outcome:
    """The typed outcome an uncaught tether error ends a workflow with."""
    if isinstance(exc, StructuredOutputError):
        if exc.kind == "invalid":
            return Outcome("failed", str(exc), error="invalid_output")
        return Outcome(exc.kind, str(exc))
    if isinstance(exc, ContextWindowExceeded):
        return Outcome("context_exceeded", str(exc))
    if isinstance(exc, ProviderError):
        return Outcome("failed", str(exc), error=exc.kind)
    return Outcome("failed", str(exc), error=type(exc).__name__)


async def _run_tool(
    tool: Tool | Callable[..., Any], arguments: Mapping[str, Any], ctx: RunContext[Any]
) -> Any:
    if isinstance(tool, FunctionTool):
        return await tool.run(arguments, ctx)
    if isinstance(tool, Tool):
        return await tool.invoke(arguments, ctx)
    if inspect.iscoroutinefunction(tool):
        return await tool(**arguments)
    value = await asyncio.to_thread(tool, **arguments)
    return await value if inspect.isawaitable(value) else value


def _failure_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _error_kind(exc: BaseException) -> str:
    if isinstance(exc, _LimitReached):
        return exc.outcome.kind
    if isinstance(exc, StructuredOutputError):
        return exc.kind
    return genai.error_type(exc)


def _name_of(function: Any) -> str:
    while isinstance(function, functools.partial):
        function = function.func
    name = getattr(function, "__name__", "") or "workflow"
    return "workflow" if name == "<lambda>" else str(name)


def _minus(after: Usage, before: Usage) -> Usage:
    return Usage(
        after.input_tokens - before.input_tokens,
        after.output_tokens - before.output_tokens,
        after.cache_read_tokens - before.cache_read_tokens,
        after.cache_write_tokens - before.cache_write_tokens,
        after.requests - before.requests,
    )
