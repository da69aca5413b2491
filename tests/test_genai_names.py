"""Every GenAI attribute name and operation value tether emits exists in the semantic
conventions version pinned in the dev group (``opentelemetry-semantic-conventions``)."""

from __future__ import annotations

import importlib.metadata

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import (
    error_attributes,
    gen_ai_attributes,
    server_attributes,
)

from tether import ScriptedClient, Usage, _genai
from tether.observe import TracingChatClient
from tether.providers.scripted import json_reply
from tether.workflows import WORKFLOW_OPERATION, Workflow, run_workflow

PINNED = "0.66b2"


def names(module: object) -> set[str]:
    return {v for k, v in vars(module).items() if k.isupper() and isinstance(v, str)}


CONVENTIONS = names(gen_ai_attributes) | names(server_attributes) | names(error_attributes)


def test_the_pinned_conventions_are_installed() -> None:
    assert importlib.metadata.version("opentelemetry-semantic-conventions") == PINNED


def test_every_attribute_name_is_a_convention() -> None:
    ours = {v for v in names(_genai) if v.startswith(("gen_ai.", "server.", "error."))}
    assert ours, "no attribute names found"
    assert ours - CONVENTIONS == set()


def test_operation_values_are_conventions() -> None:
    values = {e.value for e in gen_ai_attributes.GenAiOperationNameValues}
    assert {"chat", "invoke_agent", "execute_tool", WORKFLOW_OPERATION} <= values


def spans(exporter: InMemorySpanExporter) -> dict[str, dict[str, object]]:
    return {s.name: dict(s.attributes or {}) for s in exporter.get_finished_spans()}


async def test_cache_writes_and_the_workflow_are_named_as_the_conventions_say() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    usage = Usage(input_tokens=10, output_tokens=2, cache_write_tokens=7, requests=1)
    client = TracingChatClient(
        ScriptedClient([json_reply("ok", usage=usage)]),
        provider_name="anthropic",
        tracer_provider=provider,
    )

    async def body(wf: Workflow) -> str:
        return str(await wf.extract("Hello", str))

    result = await run_workflow(client, body, name="triage", tracer_provider=provider)
    assert result.outcome.completed
    by_name = spans(exporter)
    chat = next(a for n, a in by_name.items() if n.startswith("chat"))
    assert chat["gen_ai.usage.cache_creation.input_tokens"] == 7
    workflow = by_name["invoke_workflow triage"]
    assert workflow["gen_ai.workflow.name"] == "triage"
    assert "gen_ai.agent.name" not in workflow
