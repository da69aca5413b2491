"""``execute_tool`` spans: one for every call the model asks for.

A call that reaches its tool gets its span from :class:`TracingTool`, current while the
tool runs (so what the tool traces is its child). A call the invoker answers without
running a tool (an unknown tool, arguments that are not a JSON object) gets its span from
:class:`RejectedCallSpans`, a run listener, with the same attributes and ``error.type``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider

from tether._genai import (
    ERROR_TYPE,
    OPERATION,
    TOOL_CALL_ARGUMENTS,
    TOOL_CALL_ID,
    TOOL_CALL_RESULT,
    TOOL_DESCRIPTION,
    TOOL_NAME,
    TOOL_TYPE,
    call_arguments,
    record_error,
    to_json,
    tracer,
)
from tether.events import Event, ToolCallFinished
from tether.tools import DelegatingTool, RunContext, Tool

if TYPE_CHECKING:
    from tether.loop import Agent

UNKNOWN_TOOL = "unknown_tool"
"""``error.type`` of a call to a tool the agent does not have."""
MALFORMED_ARGUMENTS = "malformed_arguments"
"""``error.type`` of a call whose arguments are not a JSON object."""
TIMEOUT_SLACK_SECONDS = 0.05
"""How early a cancellation may come and still be the tool's time limit running out."""


class TracingTool(DelegatingTool):
    """An ``execute_tool {name}`` span (kind INTERNAL) around each call of the wrapped
    tool; arguments and result only with ``capture_content``.

    ``timeout_seconds`` is the time limit the caller puts on each call (the agent's
    ``Limits.tool_timeout_seconds``; :func:`~tether.observe.instrument` passes it). The
    limit reaches the tool as a cancellation: one that comes once the limit has run out
    is recorded as ``error.type=timeout``, any other as ``cancelled``.
    """

    def __init__(
        self,
        inner: Tool,
        *,
        capture_content: bool = False,
        timeout_seconds: float | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        super().__init__(inner)
        self.capture_content = capture_content
        self.timeout_seconds = timeout_seconds
        self._tracer = tracer(tracer_provider)

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
            attributes[TOOL_CALL_ARGUMENTS] = to_json(dict(arguments))
        loop = asyncio.get_running_loop()
        with self._tracer.start_as_current_span(
            f"execute_tool {spec.name}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            started = loop.time()
            try:
                text = await self.inner.invoke(arguments, ctx)
            except asyncio.CancelledError as exc:
                limit = self.timeout_seconds
                late = limit is not None and loop.time() - started >= limit - TIMEOUT_SLACK_SECONDS
                record_error(span, exc, "timeout" if late else "cancelled")
                raise
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
    timeout_seconds: float | None = None,
    tracer_provider: TracerProvider | None = None,
) -> list[Tool]:
    """Each tool wrapped in a :class:`TracingTool` (already traced tools are kept as is)."""
    return [
        t
        if isinstance(t, TracingTool)
        else TracingTool(
            t,
            capture_content=capture_content,
            timeout_seconds=timeout_seconds,
            tracer_provider=tracer_provider,
        )
        for t in tools
    ]


class RejectedCallSpans:
    """A run listener recording an ``execute_tool {name}`` span for each call that the
    agent answered without running a tool: ``error.type`` is ``unknown_tool``,
    ``malformed_arguments``, ``blocked`` (a rule refused it) or ``denied`` (a human did);
    the span covers the time the call took to answer, and the model's arguments and the
    error it read are recorded with ``capture_content``.
    :func:`~tether.observe.instrument` adds one to the agent's listeners."""

    def __init__(
        self,
        agent: Agent[Any],
        *,
        capture_content: bool = False,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self.agent = agent
        self.capture_content = capture_content
        self._tracer = tracer(tracer_provider)

    def __call__(self, event: Event) -> None:
        if not isinstance(event, ToolCallFinished):
            return
        call = event.call
        tool = self.agent.tools.get(call.name)
        if tool is None:
            kind = UNKNOWN_TOOL
        elif call.malformed:
            kind = MALFORMED_ARGUMENTS
        elif event.result.status in ("blocked", "denied"):
            kind = event.result.status  # refused before it ran: a policy or a human
        else:
            return  # it reached its tool, which traced it
        end = time.time_ns()
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            TOOL_NAME: call.name,
            TOOL_TYPE: "function",
            TOOL_CALL_ID: call.id,
            ERROR_TYPE: kind,
        }
        if tool is not None:
            attributes[TOOL_DESCRIPTION] = tool.spec.description
        if self.capture_content:
            arguments = call_arguments(call)
            attributes[TOOL_CALL_ARGUMENTS] = (
                arguments if isinstance(arguments, str) else to_json(arguments)
            )
            attributes[TOOL_CALL_RESULT] = event.result.content
        span = self._tracer.start_span(
            f"execute_tool {call.name}",
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=end - int(event.seconds * 1e9),
        )
        span.set_status(Status(StatusCode.ERROR, kind))
        span.end(end_time=end)
