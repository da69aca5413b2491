"""OpenTelemetry spans for tether, after the GenAI semantic conventions.

Small wrappers; the loop itself knows nothing of OpenTelemetry:

- :class:`TracingChatClient` — a ``chat {model}`` span (kind CLIENT) per model request,
  with the server's address and port and the provider's response id;
- :class:`TracingTool` / :func:`trace_tools` — an ``execute_tool {name}`` span per call
  that reaches a tool, and :class:`RejectedCallSpans` (a run listener) one per call that
  does not (an unknown tool, malformed arguments): every call gets a span;
- :func:`traced_run` / :func:`traced_resume` — the ``invoke_agent {name}`` span of a run,
  current while the run lasts, so the others become its children.

:func:`instrument` wraps an agent's client and tools in place and adds the listener.
Message contents, tool arguments and results are recorded only with
``capture_content=True`` (opt-in, as the conventions require: they may hold personal data).

Conventions followed: the GenAI semantic conventions in their current (development)
form, which name the provider ``gen_ai.provider.name`` (it replaced ``gen_ai.system``)
and the cache-write count ``gen_ai.usage.cache_creation.input_tokens``. Content attributes
are JSON strings in the documented message schema. ``error.type`` is the provider error's
kind (``rate_limit``, ``timeout``...), ``unknown_tool``, ``malformed_arguments``, ``timeout``
(a tool's time limit), ``cancelled``, the exception's class name, or for a run the outcome
kind (``turn_cap``, ``budget_exceeded``...).

``gen_ai.provider.name`` is what the adapter says (``anthropic``, ``openai``,
``llama.cpp``); for an OpenAI-protocol adapter it names the compatible server when that is
known: a hosted API by its host (``api.groq.com`` is ``groq``), a self-hosted server by the
fingerprint it signs its responses with (``ollama``, ``llama.cpp``). A name passed as
``provider_name=`` is kept as given.

Only ``opentelemetry-api`` is needed; without an SDK configured the spans are no-ops.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from tether._genai import (
    AGENT_DESCRIPTION,
    AGENT_NAME,
    CONVERSATION_ID,
    ERROR_TYPE,
    GENERIC_PROVIDER,
    INPUT_MESSAGES,
    OPERATION,
    OUTCOME,
    OUTPUT_MESSAGES,
    OUTPUT_TYPE,
    PROVIDER,
    REQUEST_MAX_TOKENS,
    REQUEST_MODEL,
    REQUEST_STREAM,
    REQUEST_TEMPERATURE,
    RESPONSE_FINISH_REASONS,
    RESPONSE_ID,
    RESPONSE_MODEL,
    RESPONSE_TIME_TO_FIRST_CHUNK,
    SERVER_ADDRESS,
    SERVER_PORT,
    SYSTEM_INSTRUCTIONS,
    TOOL_DEFINITIONS,
    UNKNOWN_PROVIDER,
    error_type,
    find_attribute,
    message_json,
    provider_for_host,
    provider_from_response,
    record_error,
    response_id,
    server_of,
    set_usage,
    to_json,
    tool_json,
    tracer,
)
from tether._tool_spans import (
    MALFORMED_ARGUMENTS,
    UNKNOWN_TOOL,
    RejectedCallSpans,
    TracingTool,
    trace_tools,
)
from tether.clients import (
    ChatClient,
    ChatOptions,
    ChatResponse,
    DelegatingChatClient,
    ResponseDone,
    StreamChunk,
)
from tether.messages import Message
from tether.tools import ToolSpec

if TYPE_CHECKING:
    from tether.loop import Agent
    from tether.outcomes import Decision, RunResult, RunState

__all__ = [
    "MALFORMED_ARGUMENTS",
    "UNKNOWN_TOOL",
    "RejectedCallSpans",
    "TracingChatClient",
    "TracingTool",
    "error_type",
    "instrument",
    "message_json",
    "record_error",
    "set_usage",
    "trace_tools",
    "traced_resume",
    "traced_run",
]

_NOT_ERRORS = frozenset({"completed", "awaiting_approval"})


def _provider_name(client: Any) -> str:
    return find_attribute(client, "provider_name") or UNKNOWN_PROVIDER


class TracingChatClient(DelegatingChatClient):
    """A ``chat {model}`` span per request, with the request settings, the response
    model, finish reason and token usage; contents only with ``capture_content``.

    ``provider_name`` defaults to the ``provider_name`` attribute of the wrapped client
    (or of one it wraps), else ``"unknown"``; a generic ``"openai"`` is narrowed to the
    compatible server when its host or its responses say which one it is. ``model``
    defaults to ``options.model``, then the wrapped client's ``model`` attribute.
    ``server`` (``server.address``, ``server.port``) comes from the client's base URL.
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
        self.server = server_of(inner)
        self.provider_name = provider_name or _provider_name(inner)
        self._narrow = provider_name is None and self.provider_name == GENERIC_PROVIDER
        if self._narrow and self.server is not None:
            self._narrow_to(provider_for_host(self.server[0]))
        self.model = model or find_attribute(inner, "model")
        self.capture_content = capture_content
        self._tracer = tracer(tracer_provider)

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
        if self.server is not None:
            attributes[SERVER_ADDRESS], attributes[SERVER_PORT] = self.server
        if self.capture_content:
            attributes[INPUT_MESSAGES] = to_json([message_json(m) for m in messages])
            if options.instructions:
                attributes[SYSTEM_INSTRUCTIONS] = to_json(
                    [{"type": "text", "content": options.instructions}]
                )
            if tools:
                attributes[TOOL_DEFINITIONS] = to_json([tool_json(t) for t in tools])
        return (f"chat {model}" if model else "chat"), attributes

    def _finish(self, span: Span, response: ChatResponse) -> None:
        if self._narrow and self._narrow_to(provider_from_response(response.raw)):
            span.set_attribute(PROVIDER, self.provider_name)
        rid = response_id(response.raw)
        if rid:
            span.set_attribute(RESPONSE_ID, rid)
        if response.model:
            span.set_attribute(RESPONSE_MODEL, response.model)
        reason = response.stop_reason.raw or response.stop_reason.value
        if reason != "missing":
            span.set_attribute(RESPONSE_FINISH_REASONS, [reason])
        set_usage(span, response.usage)
        if self.capture_content:
            out = message_json(response.message)
            out["finish_reason"] = reason
            span.set_attribute(OUTPUT_MESSAGES, to_json([out]))

    def _narrow_to(self, name: str | None) -> bool:
        """Name the compatible server once it is known; True if it changed the name."""
        if not name or name == self.provider_name:
            return False
        self.provider_name = name
        self._narrow = False
        return True


def instrument(
    agent: Agent[Any],
    *,
    provider_name: str | None = None,
    capture_content: bool = False,
    tracer_provider: TracerProvider | None = None,
) -> Agent[Any]:
    """Wrap ``agent``'s client and tools for tracing, in place, and return it.

    Tools get ``agent.limits.tool_timeout_seconds`` to tell a timeout from a cancellation,
    and a :class:`RejectedCallSpans` listener traces the calls that reach no tool. Calling
    it twice does not double the spans. Use :func:`traced_run` for the run span.
    """
    if not isinstance(agent.client, TracingChatClient):
        agent.client = TracingChatClient(
            agent.client,
            provider_name=provider_name,
            capture_content=capture_content,
            tracer_provider=tracer_provider,
        )
    traced = trace_tools(
        agent.tools.values(),
        capture_content=capture_content,
        timeout_seconds=agent.limits.tool_timeout_seconds,
        tracer_provider=tracer_provider,
    )
    agent.tools = {t.name: t for t in traced}
    if not any(isinstance(listener, RejectedCallSpans) for listener in agent.listeners):
        agent.listeners.append(
            RejectedCallSpans(
                agent, capture_content=capture_content, tracer_provider=tracer_provider
            )
        )
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
    run_id = run_kwargs.pop("run_id", None) or uuid.uuid4().hex
    async with _agent_span(agent, name, description, run_id, tracer_provider) as span:
        result = await agent.run(prompt, run_id=run_id, **run_kwargs)
        _finish_run(span, agent, result, capture_content)
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
        state = RunState.from_json(state, keys=agent.state_keys)
    async with _agent_span(agent, name, description, state.run_id, tracer_provider) as span:
        result = await agent.resume(state, decisions, **resume_kwargs)
        _finish_run(span, agent, result, capture_content)
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
    model = agent.options.model or find_attribute(agent.client, "model")
    if model:
        attributes[REQUEST_MODEL] = model
    if description:
        attributes[AGENT_DESCRIPTION] = description
    with tracer(tracer_provider).start_as_current_span(
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


def _finish_run(span: Span, agent: Agent[Any], result: RunResult, capture_content: bool) -> None:
    outcome = result.outcome
    span.set_attribute(PROVIDER, _provider_name(agent.client))  # narrowed by the responses
    span.set_attribute(OUTCOME, outcome.kind)
    set_usage(span, result.usage)
    if outcome.kind not in _NOT_ERRORS:
        span.set_attribute(ERROR_TYPE, outcome.kind)
        span.set_status(Status(StatusCode.ERROR, outcome.reason))
    if capture_content and outcome.kind == "completed" and result.transcript:
        final = message_json(result.transcript[-1])
        final["finish_reason"] = "stop"
        span.set_attribute(OUTPUT_MESSAGES, to_json([final]))
