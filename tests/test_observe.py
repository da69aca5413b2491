"""Tracing: GenAI semantic-convention spans, their parent/child structure, opt-in content."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tether.clients import ChatOptions
from tether.errors import ToolFailure
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import ToolCall, Usage
from tether.observe import TracingChatClient, instrument, trace_tools, traced_resume, traced_run
from tether.providers.faults import FaultyClient
from tether.providers.scripted import ScriptedClient, call_reply, text_reply
from tether.tools import tool

# The attribute names of the GenAI semantic conventions this module emits.
CHAT_ATTRIBUTES = {
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.request.max_tokens",
    "gen_ai.request.temperature",
    "gen_ai.response.model",
    "gen_ai.response.finish_reasons",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_creation.input_tokens",
}
TOOL_ATTRIBUTES = {
    "gen_ai.operation.name",
    "gen_ai.tool.name",
    "gen_ai.tool.type",
    "gen_ai.tool.description",
    "gen_ai.tool.call.id",
}
AGENT_ATTRIBUTES = {
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.agent.name",
    "gen_ai.conversation.id",
    "gen_ai.request.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
}
CONTENT_ATTRIBUTES = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}
SECRET = "customer-4111-secret"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp


@tool
def lookup(order_id: str) -> str:
    """Look up an order. Use it to read an order. It changes nothing."""
    if order_id == "missing":
        raise ToolFailure("No such order.")
    return f"order {order_id}: 30 EUR, {SECRET}"


@tool(requires_approval=True)
def refund(order_id: str) -> str:
    """Refund an order. Use it only after checking it. It cannot be undone."""
    return f"refunded {order_id}"


class ModelClient(ScriptedClient):
    provider_name = "openai"
    model = "gpt-test"


def script() -> list[Any]:
    return [
        call_reply(
            ("lookup", {"order_id": "A-1"}),
            usage=Usage(input_tokens=100, output_tokens=10, cache_read_tokens=20),
        ),
        text_reply(f"The order costs 30 EUR ({SECRET}).", usage=Usage(150, 12)),
    ]


def by_name(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def all_attribute_names(spans: tuple[ReadableSpan, ...]) -> set[str]:
    return {k for s in spans for k in (s.attributes or {})}


async def test_run_makes_agent_chat_and_tool_spans_with_convention_attributes(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    agent = Agent(
        ModelClient(script()),
        [lookup],
        instructions=f"Be brief. {SECRET}",
        options=ChatOptions(max_output_tokens=256, temperature=0.0),
    )
    instrument(agent, tracer_provider=provider)
    result = await traced_run(
        agent, f"Price of A-1? {SECRET}", name="support", tracer_provider=provider
    )
    assert result.outcome.kind == "completed"

    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == [
        "chat gpt-test",
        "execute_tool lookup",
        "chat gpt-test",
        "invoke_agent support",
    ]
    (root,) = by_name(spans, "invoke_agent")
    chats = by_name(spans, "chat ")
    (tool_span,) = by_name(spans, "execute_tool")

    # structure: one trace, the run span parents every other span
    assert root.parent is None
    for child in (*chats, tool_span):
        assert child.parent is not None
        assert child.parent.span_id == root.context.span_id
        assert child.context.trace_id == root.context.trace_id

    assert root.kind == SpanKind.INTERNAL
    assert tool_span.kind == SpanKind.INTERNAL
    assert all(c.kind == SpanKind.CLIENT for c in chats)

    first = dict(chats[0].attributes or {})
    assert set(first) == CHAT_ATTRIBUTES - {
        "gen_ai.response.model",
        "gen_ai.usage.cache_creation.input_tokens",
    }
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.provider.name"] == "openai"
    assert first["gen_ai.request.model"] == "gpt-test"
    assert first["gen_ai.request.max_tokens"] == 256
    assert first["gen_ai.request.temperature"] == 0.0
    assert first["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert first["gen_ai.usage.input_tokens"] == 120  # cached tokens included
    assert first["gen_ai.usage.cache_read.input_tokens"] == 20
    assert first["gen_ai.usage.output_tokens"] == 10
    assert dict(chats[1].attributes or {})["gen_ai.response.finish_reasons"] == ("end_turn",)

    tool_attrs = dict(tool_span.attributes or {})
    assert set(tool_attrs) == TOOL_ATTRIBUTES
    assert tool_attrs["gen_ai.operation.name"] == "execute_tool"
    assert tool_attrs["gen_ai.tool.name"] == "lookup"
    assert tool_attrs["gen_ai.tool.call.id"] == result.transcript[1].tool_calls[0].id

    root_attrs = dict(root.attributes or {})
    assert set(root_attrs) == AGENT_ATTRIBUTES | {
        "tether.outcome",
        "gen_ai.usage.cache_read.input_tokens",
    }
    assert root_attrs["gen_ai.operation.name"] == "invoke_agent"
    assert root_attrs["gen_ai.agent.name"] == "support"
    assert root_attrs["gen_ai.conversation.id"] == result.run_id
    assert root_attrs["gen_ai.usage.input_tokens"] == 270
    assert root_attrs["gen_ai.usage.output_tokens"] == 22
    assert root_attrs["tether.outcome"] == "completed"
    assert root.status.status_code != StatusCode.ERROR


async def test_content_is_absent_unless_opted_in(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    agent = instrument(
        Agent(ModelClient(script()), [lookup], instructions=f"Be brief. {SECRET}"),
        tracer_provider=provider,
    )
    await traced_run(agent, f"Price? {SECRET}", tracer_provider=provider)
    spans = exporter.get_finished_spans()
    assert not all_attribute_names(spans) & CONTENT_ATTRIBUTES
    dump = json.dumps([dict(s.attributes or {}) for s in spans], default=str)
    assert SECRET not in dump
    assert "Be brief" not in dump


async def test_content_is_recorded_in_convention_schema_when_opted_in(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    agent = instrument(
        Agent(ModelClient(script()), [lookup], instructions="Be brief."),
        capture_content=True,
        tracer_provider=provider,
    )
    await traced_run(agent, "Price of A-1?", capture_content=True, tracer_provider=provider)
    spans = exporter.get_finished_spans()
    assert all_attribute_names(spans) >= CONTENT_ATTRIBUTES

    second_chat = by_name(spans, "chat ")[1]
    attrs = dict(second_chat.attributes or {})
    inputs = json.loads(str(attrs["gen_ai.input.messages"]))
    assert [m["role"] for m in inputs] == ["user", "assistant", "tool"]
    assert inputs[0]["parts"] == [{"type": "text", "content": "Price of A-1?"}]
    call = inputs[1]["parts"][0]
    assert call["type"] == "tool_call"
    assert call["name"] == "lookup"
    assert call["arguments"] == {"order_id": "A-1"}
    assert inputs[2]["parts"][0]["type"] == "tool_call_response"
    assert inputs[2]["parts"][0]["id"] == call["id"]
    assert json.loads(str(attrs["gen_ai.system_instructions"])) == [
        {"type": "text", "content": "Be brief."}
    ]
    (definition,) = json.loads(str(attrs["gen_ai.tool.definitions"]))
    assert definition["type"] == "function"
    assert definition["name"] == "lookup"
    (out,) = json.loads(str(attrs["gen_ai.output.messages"]))
    assert out["role"] == "assistant"
    assert out["finish_reason"] == "end_turn"

    tool_attrs = dict(by_name(spans, "execute_tool")[0].attributes or {})
    assert json.loads(str(tool_attrs["gen_ai.tool.call.arguments"])) == {"order_id": "A-1"}
    assert str(tool_attrs["gen_ai.tool.call.result"]).startswith("order A-1")


async def test_failing_tool_span_has_error_type(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    client = ModelClient([call_reply(("lookup", {"order_id": "missing"})), text_reply("Sorry.")])
    agent = Agent(client, trace_tools([lookup], tracer_provider=provider))
    result = await agent.run("Price of missing?")
    assert result.transcript[2].parts[0].is_error  # type: ignore[union-attr]
    (span,) = by_name(exporter.get_finished_spans(), "execute_tool")
    assert span.status.status_code == StatusCode.ERROR
    assert dict(span.attributes or {})["error.type"] == "tether.errors.ToolFailure"


async def test_provider_error_sets_error_type_on_chat_and_run_spans(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    failing = FaultyClient(ModelClient([text_reply("never")]), {1: "rate_limit"})
    agent = Agent(TracingChatClient(failing, provider_name="openai", tracer_provider=provider))
    result = await traced_run(agent, "Hi", tracer_provider=provider)
    assert result.outcome.kind == "failed"
    spans = exporter.get_finished_spans()
    (chat,) = by_name(spans, "chat")
    assert dict(chat.attributes or {})["error.type"] == "rate_limit"
    assert chat.status.status_code == StatusCode.ERROR
    (root,) = by_name(spans, "invoke_agent")
    assert dict(root.attributes or {})["error.type"] == "failed"
    assert root.status.status_code == StatusCode.ERROR


async def test_turn_cap_is_an_error_but_awaiting_approval_is_not(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    looping = ModelClient(lambda history: call_reply(("lookup", {"order_id": "A-1"})))
    agent = instrument(
        Agent(looping, [lookup], limits=Limits(max_turns=2)), tracer_provider=provider
    )
    capped = await traced_run(agent, "loop", tracer_provider=provider)
    assert capped.outcome.kind == "turn_cap"
    (root,) = by_name(exporter.get_finished_spans(), "invoke_agent")
    assert dict(root.attributes or {})["error.type"] == "turn_cap"
    exporter.clear()

    client = ModelClient([call_reply(("refund", {"order_id": "A-1"})), text_reply("Refunded.")])
    agent = instrument(Agent(client, [refund]), tracer_provider=provider)
    paused = await traced_run(agent, "Refund A-1", tracer_provider=provider)
    assert paused.outcome.kind == "awaiting_approval"
    (root,) = by_name(exporter.get_finished_spans(), "invoke_agent")
    assert "error.type" not in (root.attributes or {})
    assert root.status.status_code != StatusCode.ERROR
    assert not by_name(exporter.get_finished_spans(), "execute_tool")  # nothing ran
    exporter.clear()

    assert paused.state is not None
    (pending,) = paused.state.pending
    done = await traced_resume(
        agent,
        paused.state.to_json(),
        [pending.approve()],
        tracer_provider=provider,
    )
    assert done.outcome.kind == "completed"
    spans = exporter.get_finished_spans()
    (root,) = by_name(spans, "invoke_agent")
    (tool_span,) = by_name(spans, "execute_tool")
    assert tool_span.parent is not None
    assert tool_span.parent.span_id == root.context.span_id
    assert dict(root.attributes or {})["gen_ai.conversation.id"] == paused.run_id


async def test_concurrent_tool_spans_each_parented_to_the_run(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    @tool
    async def slow(n: int) -> str:
        """Wait a little. Use it in tests. It does nothing else."""
        await asyncio.sleep(0.01 * n)
        return str(n)

    client = ModelClient([call_reply(*[("slow", {"n": i}) for i in range(3)]), text_reply("ok")])
    agent = instrument(Agent(client, [slow]), tracer_provider=provider)
    await traced_run(agent, "go", tracer_provider=provider)
    spans = exporter.get_finished_spans()
    (root,) = by_name(spans, "invoke_agent")
    tools = by_name(spans, "execute_tool")
    assert len(tools) == 3
    assert {t.parent.span_id for t in tools if t.parent} == {root.context.span_id}
    assert len({dict(t.attributes or {})["gen_ai.tool.call.id"] for t in tools}) == 3


async def test_streaming_request_gets_one_chat_span(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    seen: list[object] = []
    agent = Agent(
        TracingChatClient(ModelClient([text_reply("Hello")]), tracer_provider=provider),
        stream=True,
        listeners=[seen.append],
    )
    result = await traced_run(agent, "Hi", tracer_provider=provider)
    assert result.output == "Hello"
    (chat,) = by_name(exporter.get_finished_spans(), "chat")
    attrs = dict(chat.attributes or {})
    assert attrs["gen_ai.request.stream"] is True
    assert attrs["gen_ai.response.finish_reasons"] == ("end_turn",)
    assert "gen_ai.response.time_to_first_chunk" in attrs
    (root,) = by_name(exporter.get_finished_spans(), "invoke_agent")
    assert chat.parent is not None
    assert chat.parent.span_id == root.context.span_id


async def test_instrument_twice_does_not_double_spans(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    agent = Agent(ModelClient(script()), [lookup])
    instrument(instrument(agent, tracer_provider=provider), tracer_provider=provider)
    await agent.run("Price?")
    names = [s.name for s in exporter.get_finished_spans()]
    assert names == ["chat gpt-test", "execute_tool lookup", "chat gpt-test"]
    assert agent.tools["lookup"].requires_approval is False
    assert len(agent.listeners) == 1


def test_unknown_provider_and_model_are_stated_not_guessed() -> None:
    client = TracingChatClient(ScriptedClient([text_reply("x")]))
    assert client.provider_name == "unknown"
    assert client.model is None


def test_loop_does_not_import_opentelemetry() -> None:
    import tether.loop

    source = Path(tether.loop.__file__).read_text(encoding="utf-8")
    assert "opentelemetry" not in source


@tool
async def stuck() -> str:
    """Never answers in time. Use it in tests. It does nothing."""
    await asyncio.sleep(30)
    return "late"


async def test_timed_out_tool_span_says_timeout(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    client = ModelClient([call_reply(("stuck", {})), text_reply("gave up")])
    agent = instrument(
        Agent(client, [stuck], limits=Limits(tool_timeout_seconds=0.05)), tracer_provider=provider
    )
    result = await agent.run("go")
    assert "did not finish" in result.transcript[2].parts[0].content  # type: ignore[union-attr]
    (span,) = by_name(exporter.get_finished_spans(), "execute_tool")
    assert dict(span.attributes or {})["error.type"] == "timeout"
    assert span.status.status_code == StatusCode.ERROR


async def test_tool_cancelled_by_the_run_is_not_a_timeout(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    client = ModelClient([call_reply(("stuck", {})), text_reply("gave up")])
    limits = Limits(tool_timeout_seconds=20, max_wall_seconds=0.1)
    agent = instrument(Agent(client, [stuck], limits=limits), tracer_provider=provider)
    result = await traced_run(agent, "go", tracer_provider=provider)
    assert result.outcome.kind == "budget_exceeded"
    (span,) = by_name(exporter.get_finished_spans(), "execute_tool")
    assert dict(span.attributes or {})["error.type"] == "cancelled"
    assert span.status.status_code == StatusCode.ERROR


async def test_calls_that_reach_no_tool_get_a_span_with_error_type(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    calls = call_reply(
        ("lookup", {"order_id": "A-1"}),
        ("no_such_tool", {"order_id": "A-1"}),
        ToolCall("", "lookup", {}, '{"order_id": "A-1"'),  # cut-off JSON
        ("lookup", {"order": "A-1"}),  # against the schema: reaches the tool, which refuses
    )
    client = ModelClient([calls, text_reply("Done.")])
    agent = instrument(Agent(client, [lookup]), capture_content=True, tracer_provider=provider)
    result = await traced_run(agent, "go", tracer_provider=provider)
    assert result.outcome.kind == "completed"

    spans = exporter.get_finished_spans()
    (root,) = by_name(spans, "invoke_agent")
    tool_spans = by_name(spans, "execute_tool")
    assert len(tool_spans) == 4  # every call, one span each
    by_id = {dict(s.attributes or {})["gen_ai.tool.call.id"]: s for s in tool_spans}
    ids = [c.id for c in result.transcript[1].tool_calls]
    ok, unknown, malformed, invalid = (by_id[i] for i in ids)
    results = {r.call_id: r for r in result.transcript[2].parts}  # type: ignore[union-attr]

    assert "error.type" not in (ok.attributes or {})
    assert dict(invalid.attributes or {})["error.type"] == "tether.errors.InvalidArguments"
    for span, kind, name in (
        (unknown, "unknown_tool", "no_such_tool"),
        (malformed, "malformed_arguments", "lookup"),
    ):
        attrs = dict(span.attributes or {})
        assert span.name == f"execute_tool {name}"
        assert span.kind == SpanKind.INTERNAL
        assert span.parent is not None and span.parent.span_id == root.context.span_id
        assert span.status.status_code == StatusCode.ERROR
        assert attrs["error.type"] == kind
        assert attrs["gen_ai.operation.name"] == "execute_tool"
        assert attrs["gen_ai.tool.name"] == name
        assert attrs["gen_ai.tool.type"] == "function"
        call_id = str(attrs["gen_ai.tool.call.id"])
        assert attrs["gen_ai.tool.call.result"] == results[call_id].content
        assert results[call_id].is_error
        assert span.end_time is not None and span.start_time is not None
        assert span.end_time >= span.start_time
    assert dict(malformed.attributes or {})["gen_ai.tool.call.arguments"] == '{"order_id": "A-1"'
    assert dict(malformed.attributes or {})["gen_ai.tool.description"] == lookup.spec.description
    assert "gen_ai.tool.description" not in (unknown.attributes or {})
    assert json.loads(str(dict(unknown.attributes or {})["gen_ai.tool.call.arguments"])) == {
        "order_id": "A-1"
    }


async def test_rejected_calls_record_no_content_unless_opted_in(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    calls = call_reply(("no_such_tool", {"secret": SECRET}))
    agent = instrument(
        Agent(ModelClient([calls, text_reply("Done.")]), [lookup]), tracer_provider=provider
    )
    await agent.run("go")
    (span,) = by_name(exporter.get_finished_spans(), "execute_tool")
    assert dict(span.attributes or {})["error.type"] == "unknown_tool"
    assert SECRET not in json.dumps(dict(span.attributes or {}))


async def test_blocked_and_denied_calls_get_a_span(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    from tether.guards.policy import ArgumentPolicy, matches

    guarded = ArgumentPolicy(lookup, matches("order_id", r"A-\d"))
    calls = call_reply(("lookup", {"order_id": "Z-9"}))
    agent = instrument(
        Agent(ModelClient([calls, text_reply("Done.")]), [guarded]), tracer_provider=provider
    )
    result = await agent.run("go")
    assert result.transcript[2].tool_results[0].status == "blocked"
    (span,) = by_name(exporter.get_finished_spans(), "execute_tool")
    assert dict(span.attributes or {})["error.type"] == "blocked"


def test_adapters_name_their_provider_for_tracing() -> None:
    from tether.observe import TracingChatClient
    from tether.providers.anthropic import AnthropicClient
    from tether.providers.local import LocalClient
    from tether.providers.openai_chat import OpenAIChatClient
    from tether.providers.openai_responses import OpenAIResponsesClient

    pairs = [
        (AnthropicClient("m", api_key="k"), "anthropic"),
        (OpenAIResponsesClient("m", api_key="k"), "openai"),
        (OpenAIChatClient("m", base_url="http://127.0.0.1:9/v1", api_key="k"), "openai"),
        (LocalClient(), "llama.cpp"),
    ]
    for client, name in pairs:
        assert TracingChatClient(client).provider_name == name
