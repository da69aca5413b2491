"""OpenTelemetry spans for tether, after the GenAI semantic conventions.

Three pieces, each one small wrapper; the loop itself knows nothing of OpenTelemetry:

- :class:`TracingChatClient` — a ``chat {model}`` span (kind CLIENT) per model request;
- :class:`TracingTool` / :func:`trace_tools` — an ``execute_tool {name}`` span per call;
- :func:`traced_run` / :func:`traced_resume` — the ``invoke_agent {name}`` span of a run,
  current while the run lasts, so the other two become its children.

:func:`instrument` wraps an agent's client and tools in place. Message contents, tool
arguments and results are recorded only with ``capture_content=True`` (opt-in, as the
conventions require: they may hold personal data).

Conventions followed: the GenAI semantic conventions in their current (development)
form, which name the provider ``gen_ai.provider.name`` (it replaced ``gen_ai.system``)
and the cache-write count ``gen_ai.usage.cache_write.input_tokens``. Content attributes
are JSON strings in the documented message schema. ``error.type`` is the provider error's
kind (``rate_limit``, ``timeout``...), the exception's class name, or for a run the
outcome kind (``turn_cap``, ``budget_exceeded``...).

Only ``opentelemetry-api`` is needed; without an SDK configured the spans are no-ops.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from tether.clients import (
    ChatClient,
    ChatOptions,
    ChatResponse,
    DelegatingChatClient,
    ResponseDone,
    StreamChunk,
)
from tether.errors import ProviderError
from tether.messages import Message, Text, ToolCall, ToolResult, Usage
from tether.tools import DelegatingTool, RunContext, Tool, ToolSpec

if TYPE_CHECKING:
    from tether.loop import Agent
    from tether.outcomes import Decision, RunResult, RunState

TRACER_NAME = "tether"

# Attribute names (GenAI semantic conventions).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_STREAM = "gen_ai.request.stream"
OUTPUT_TYPE = "gen_ai.output.type"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
USAGE_INPUT = "gen_ai.usage.input_tokens"
USAGE_OUTPUT = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
USAGE_CACHE_WRITE = "gen_ai.usage.cache_write.input_tokens"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
TOOL_DEFINITIONS = "gen_ai.tool.definitions"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_DESCRIPTION = "gen_ai.tool.description"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT = "gen_ai.tool.call.result"
AGENT_NAME = "gen_ai.agent.name"
AGENT_DESCRIPTION = "gen_ai.agent.description"
CONVERSATION_ID = "gen_ai.conversation.id"
ERROR_TYPE = "error.type"
OUTCOME = "tether.outcome"
"""Not a convention: the run's outcome kind (``completed``, ``turn_cap``...)."""

UNKNOWN_PROVIDER = "unknown"
_NOT_ERRORS = frozenset({"completed", "awaiting_approval"})


def _tracer(provider: TracerProvider | None) -> trace.Tracer:
    return trace.get_tracer(TRACER_NAME, tracer_provider=provider)


def _find(client: Any, attribute: str) -> str | None:
    """A non-empty string attribute of the client or of a client it wraps."""
    for _ in range(32):
        value = getattr(client, attribute, None)
        if isinstance(value, str) and value:
            return value
        client = getattr(client, "inner", None)
        if client is None:
            break
    return None


def _provider_name(client: Any) -> str:
    return _find(client, "provider_name") or UNKNOWN_PROVIDER


class TracingChatClient(DelegatingChatClient):
    """A ``chat {model}`` span per request, with the request settings, the response
    model, finish reason and token usage; contents only with ``capture_content``.

    ``provider_name`` defaults to the ``provider_name`` attribute of the wrapped client
    (or of one it wraps), else ``"unknown"``; ``model`` to ``options.model``, then the
    wrapped client's ``model`` attribute.
    """

    def __init__(
        self,
        inner: ChatClient,
        *,
        provider_name: str | None = None,
        model: str | None = None,
        capture_content: bool = False,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        super().__init__(inner)
        self.provider_name = provider_name or _provider_name(inner)
        self.model = model or _find(inner, "model")
        self.capture_content = capture_content
        self._tracer = _tracer(tracer_provider)

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        name, attributes = self._start(messages, tools, options)
        with self._tracer.start_as_current_span(
            name,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                response = await self.inner.complete(messages, tools, options)
            except BaseException as exc:
                record_error(span, exc)
                raise
            self._finish(span, response)
            return response

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        name, attributes = self._start(messages, tools, options)
        attributes[REQUEST_STREAM] = True
        # Not made current: a generator cannot keep a context attached across yields.
        span = self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
        started = time.perf_counter()
        first = True
        try:
            async for chunk in self.inner.stream(messages, tools, options):
                if first:
                    span.set_attribute(RESPONSE_TIME_TO_FIRST_CHUNK, time.perf_counter() - started)
                    first = False
                if isinstance(chunk, ResponseDone):
                    self._finish(span, chunk.response)
                yield chunk
        except BaseException as exc:
            record_error(span, exc)
            raise
        finally:
            span.end()

    def _start(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> tuple[str, dict[str, Any]]:
        model = options.model or self.model
        attributes: dict[str, Any] = {OPERATION: "chat", PROVIDER: self.provider_name}
        if model:
            attributes[REQUEST_MODEL] = model
        if options.max_output_tokens is not None:
            attributes[REQUEST_MAX_TOKENS] = options.max_output_tokens
        if options.temperature is not None:
            attributes[REQUEST_TEMPERATURE] = options.temperature
        if options.output_schema is not None:
            attributes[OUTPUT_TYPE] = "json"
        if self.capture_content:
            attributes[INPUT_MESSAGES] = _json([message_json(m) for m in messages])
            if options.instructions:
                attributes[SYSTEM_INSTRUCTIONS] = _json(
                    [{"type": "text", "content": options.instructions}]
                )
            if tools:
                attributes[TOOL_DEFINITIONS] = _json([_tool_json(t) for t in tools])
        return (f"chat {model}" if model else "chat"), attributes

    def _finish(self, span: Span, response: ChatResponse) -> None:
        if response.model:
            span.set_attribute(RESPONSE_MODEL, response.model)
        reason = response.stop_reason.raw or response.stop_reason.value
        if reason != "missing":
            span.set_attribute(RESPONSE_FINISH_REASONS, [reason])
        set_usage(span, response.usage)
        if self.capture_content:
            out = message_json(response.message)
            out["finish_reason"] = reason
            span.set_attribute(OUTPUT_MESSAGES, _json([out]))


class TracingTool(DelegatingTool):
    """An ``execute_tool {name}`` span (kind INTERNAL) around each call of the wrapped
    tool; arguments and result only with ``capture_content``."""

    def __init__(
        self,
        inner: Tool,
        *,
        capture_content: bool = False,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        super().__init__(inner)
        self.capture_content = capture_content
        self._tracer = _tracer(tracer_provider)

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        spec = self.spec
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            TOOL_NAME: spec.name,
            TOOL_TYPE: "function",
            TOOL_DESCRIPTION: spec.description,
        }
        if ctx.call is not None:
            attributes[TOOL_CALL_ID] = ctx.call.id
        if self.capture_content:
            attributes[TOOL_CALL_ARGUMENTS] = _json(dict(arguments))
        with self._tracer.start_as_current_span(
            f"execute_tool {spec.name}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                text = await self.inner.invoke(arguments, ctx)
            except BaseException as exc:
                record_error(span, exc)
                raise
            if self.capture_content:
                span.set_attribute(TOOL_CALL_RESULT, text)
            return text


def trace_tools(
    tools: Iterable[Tool],
    *,
    capture_content: bool = False,
    tracer_provider: TracerProvider | None = None,
) -> list[Tool]:
    """Each tool wrapped in a :class:`TracingTool` (already traced tools are kept as is)."""
    return [
        t
        if isinstance(t, TracingTool)
        else TracingTool(t, capture_content=capture_content, tracer_provider=tracer_provider)
        for t in tools
    ]


def instrument(
    agent: Agent[Any],
    *,
    provider_name: str | None = None,
    capture_content: bool = False,
    tracer_provider: TracerProvider | None = None,
) -> Agent[Any]:
    """Wrap ``agent``'s client and tools for tracing, in place, and return it.

    Calling it twice does not double the spans. Use :func:`traced_run` for the run span.
    """
    if not isinstance(agent.client, TracingChatClient):
        agent.client = TracingChatClient(
            agent.client,
            provider_name=provider_name,
            capture_content=capture_content,
            tracer_provider=tracer_provider,
        )
    traced = trace_tools(
        agent.tools.values(), capture_content=capture_content, tracer_provider=tracer_provider
    )
    agent.tools = {t.name: t for t in traced}
    return agent


async def traced_run(
    agent: Agent[Any],
    prompt: str | Sequence[Message],
    *,
    name: str = "tether",
    description: str | None = None,
    capture_content: bool = False,
    tracer_provider: TracerProvider | None = None,
    **run_kwargs: Any,
) -> RunResult:
    """``agent.run(prompt)`` inside an ``invoke_agent {name}`` span (kind INTERNAL).

    The span carries the run id as ``gen_ai.conversation.id`` (the history that tether
    manages and resumes under that id), the run's total usage, and, when the run did not
    complete, ``error.type`` = the outcome kind. A run awaiting approval is not an error.
    """
    import uuid

    run_id = run_kwargs.pop("run_id", None) or uuid.uuid4().hex
    async with _agent_span(agent, name, description, run_id, tracer_provider) as span:
        result = await agent.run(prompt, run_id=run_id, **run_kwargs)
        _finish_run(span, result, capture_content)
        return result


async def traced_resume(
    agent: Agent[Any],
    state: RunState | str,
    decisions: Iterable[Decision] = (),
    *,
    name: str = "tether",
    description: str | None = None,
    capture_content: bool = False,
    tracer_provider: TracerProvider | None = None,
    **resume_kwargs: Any,
) -> RunResult:
    """:meth:`Agent.resume` inside an ``invoke_agent {name}`` span (see :func:`traced_run`)."""
    from tether.outcomes import RunState

    if isinstance(state, str):
        state = RunState.from_json(state)
    async with _agent_span(agent, name, description, state.run_id, tracer_provider) as span:
        result = await agent.resume(state, decisions, **resume_kwargs)
        _finish_run(span, result, capture_content)
        return result


@asynccontextmanager
async def _agent_span(
    agent: Agent[Any],
    name: str,
    description: str | None,
    run_id: str,
    tracer_provider: TracerProvider | None,
) -> AsyncIterator[Span]:
    attributes: dict[str, Any] = {
        OPERATION: "invoke_agent",
        PROVIDER: _provider_name(agent.client),
        AGENT_NAME: name,
        CONVERSATION_ID: run_id,
    }
    model = agent.options.model or _find(agent.client, "model")
    if model:
        attributes[REQUEST_MODEL] = model
    if description:
        attributes[AGENT_DESCRIPTION] = description
    with _tracer(tracer_provider).start_as_current_span(
        f"invoke_agent {name}",
        kind=SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            record_error(span, exc)
            raise


def _finish_run(span: Span, result: RunResult, capture_content: bool) -> None:
    outcome = result.outcome
    span.set_attribute(OUTCOME, outcome.kind)
    set_usage(span, result.usage)
    if outcome.kind not in _NOT_ERRORS:
        span.set_attribute(ERROR_TYPE, outcome.kind)
        span.set_status(Status(StatusCode.ERROR, outcome.reason))
    if capture_content and outcome.kind == "completed" and result.transcript:
        final = message_json(result.transcript[-1])
        final["finish_reason"] = "stop"
        span.set_attribute(OUTPUT_MESSAGES, _json([final]))


# --- shared helpers -------------------------------------------------------------------


def record_error(span: Span, exc: BaseException) -> None:
    """Mark ``span`` as failed: ``error.type``, status ERROR, and the exception event."""
    span.set_attribute(ERROR_TYPE, error_type(exc))
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
    if isinstance(exc, Exception):
        span.record_exception(exc)


def error_type(exc: BaseException) -> str:
    """A low-cardinality name for an error: a provider error's kind, else the class."""
    if isinstance(exc, ProviderError):
        return exc.kind
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"  # also what a timeout looks like from inside the call
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def set_usage(span: Span, usage: Usage) -> None:
    """Token counts; ``input_tokens`` includes cached tokens, as the conventions say."""
    span.set_attribute(
        USAGE_INPUT, usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    )
    span.set_attribute(USAGE_OUTPUT, usage.output_tokens)
    if usage.cache_read_tokens:
        span.set_attribute(USAGE_CACHE_READ, usage.cache_read_tokens)
    if usage.cache_write_tokens:
        span.set_attribute(USAGE_CACHE_WRITE, usage.cache_write_tokens)


def message_json(message: Message) -> dict[str, Any]:
    """One message in the conventions' JSON shape (``role`` and typed ``parts``)."""
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, Text):
            parts.append({"type": "text", "content": part.text})
        elif isinstance(part, ToolCall):
            arguments = part.raw_arguments if part.malformed else dict(part.arguments)
            parts.append(
                {"type": "tool_call", "id": part.id, "name": part.name, "arguments": arguments}
            )
        elif isinstance(part, ToolResult):
            parts.append(
                {"type": "tool_call_response", "id": part.call_id, "response": part.content}
            )
    return {"role": message.role, "parts": parts}


def _tool_json(spec: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": dict(spec.parameters),
    }


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
