"""Chat spans against real SDKs on a local server: response id, server address and port,
and the provider name of an OpenAI-compatible server when its responses say which."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from provider_server import FakeProvider, Reply
from provider_wire import a_message, a_sse, a_text, c_completion, c_sse, r_response, r_sse, r_text

from tether.clients import ChatClient, ChatOptions, ResponseDone
from tether.loop import Agent
from tether.messages import Message
from tether.observe import TracingChatClient, traced_run
from tether.providers.anthropic import AnthropicClient
from tether.providers.openai_chat import OpenAIChatClient
from tether.providers.openai_responses import OpenAIResponsesClient


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracing(exporter: InMemorySpanExporter) -> TracerProvider:
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    return tp


def signed(reply: Reply, fingerprint: str) -> Reply:
    """``reply`` with ``system_fingerprint`` on its body or on every streamed chunk."""
    if reply.events is None:
        return Reply({**reply.body, "system_fingerprint": fingerprint})
    events = [
        (n, {**d, "system_fingerprint": fingerprint} if isinstance(d, dict) else d)
        for n, d in reply.events
    ]
    return Reply(events=events)


async def ask(client: ChatClient, stream: bool) -> None:
    if stream:
        chunks = [c async for c in client.stream([Message.user("q")], [], ChatOptions())]
        assert isinstance(chunks[-1], ResponseDone)
    else:
        await client.complete([Message.user("q")], [], ChatOptions())


def chat_attributes(exporter: InMemorySpanExporter) -> list[dict[str, Any]]:
    spans: tuple[ReadableSpan, ...] = exporter.get_finished_spans()
    return [dict(s.attributes or {}) for s in spans if s.name.startswith("chat")]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("fingerprint", "provider"),
    [
        (None, "openai"),
        ("fp_ollama", "ollama"),
        ("b5165-0c50923944", "llama.cpp"),
        ("fp_44709d6fcb", "openai"),
    ],
)
async def test_openai_compatible_server_is_named_when_it_signs_its_responses(
    server: FakeProvider,
    exporter: InMemorySpanExporter,
    tracing: TracerProvider,
    stream: bool,
    fingerprint: str | None,
    provider: str,
) -> None:
    completion = c_completion("Bonjour.")
    reply = c_sse(completion) if stream else Reply(completion)
    server.script = [signed(reply, fingerprint) if fingerprint else reply] * 2
    inner = OpenAIChatClient("local-test", base_url=f"{server.url}/v1", max_retries=0)
    client = TracingChatClient(inner, tracer_provider=tracing)
    port = int(server.url.rsplit(":", 1)[1])

    await ask(client, stream)
    await ask(client, stream)

    first, second = chat_attributes(exporter)
    for attrs in (first, second):
        assert attrs["gen_ai.provider.name"] == provider
        assert attrs["gen_ai.response.id"] == "chatcmpl-1"
        assert attrs["server.address"] == "127.0.0.1"
        assert attrs["server.port"] == port
    assert client.provider_name == provider


async def test_a_provider_name_given_is_kept(
    server: FakeProvider, exporter: InMemorySpanExporter, tracing: TracerProvider
) -> None:
    server.script = [signed(Reply(c_completion("Bonjour.")), "fp_ollama")]
    inner = OpenAIChatClient("local-test", base_url=f"{server.url}/v1", max_retries=0)
    client = TracingChatClient(inner, provider_name="my-gateway", tracer_provider=tracing)
    await ask(client, stream=False)
    (attrs,) = chat_attributes(exporter)
    assert attrs["gen_ai.provider.name"] == "my-gateway"


async def test_run_span_names_the_server_found_by_its_responses(
    server: FakeProvider, exporter: InMemorySpanExporter, tracing: TracerProvider
) -> None:
    server.script = [signed(Reply(c_completion("Bonjour.")), "fp_ollama")]
    inner = OpenAIChatClient("local-test", base_url=f"{server.url}/v1", max_retries=0)
    agent = Agent(TracingChatClient(inner, tracer_provider=tracing))
    result = await traced_run(agent, "q", tracer_provider=tracing)
    assert result.outcome.kind == "completed"
    (root,) = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert dict(root.attributes or {})["gen_ai.provider.name"] == "ollama"


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_and_responses_spans_carry_the_response_id(
    server: FakeProvider, exporter: InMemorySpanExporter, tracing: TracerProvider, stream: bool
) -> None:
    message = a_message(a_text("Bonjour."))
    response = r_response(r_text("Bonjour."))
    server.script = [
        a_sse(message) if stream else Reply(message),
        r_sse(response) if stream else Reply(response),
    ]
    port = int(server.url.rsplit(":", 1)[1])
    anthropic = AnthropicClient("claude-test", api_key="k", base_url=server.url, max_retries=0)
    responses = OpenAIResponsesClient(
        "gpt-test", api_key="k", base_url=f"{server.url}/v1", max_retries=0
    )
    for inner in (anthropic, responses):
        await ask(TracingChatClient(inner, tracer_provider=tracing), stream)
    first, second = chat_attributes(exporter)
    assert (first["gen_ai.provider.name"], first["gen_ai.response.id"]) == ("anthropic", "msg_test")
    assert (second["gen_ai.provider.name"], second["gen_ai.response.id"]) == ("openai", "resp_1")
    for attrs in (first, second):
        assert (attrs["server.address"], attrs["server.port"]) == ("127.0.0.1", port)


def test_hosted_compatible_apis_are_named_by_their_host() -> None:
    cases = [
        ("https://api.groq.com/openai/v1", "groq", ("api.groq.com", 443)),
        ("https://api.deepseek.com/v1", "deepseek", ("api.deepseek.com", 443)),
        ("https://my-resource.openai.azure.com/openai/v1", "azure.ai.openai", None),
        ("https://api.openai.com/v1", "openai", ("api.openai.com", 443)),
        ("http://127.0.0.1:11434/v1", "openai", ("127.0.0.1", 11434)),
        ("http://localhost/v1", "openai", ("localhost", 80)),
    ]
    for url, provider, server in cases:
        client = TracingChatClient(OpenAIChatClient("m", base_url=url, api_key="k"))
        assert client.provider_name == provider, url
        if server is not None:
            assert client.server == server
    default = TracingChatClient(AnthropicClient("m", api_key="k"))
    assert (default.provider_name, default.server) == ("anthropic", ("api.anthropic.com", 443))
    named = TracingChatClient(
        OpenAIChatClient("m", base_url="https://api.groq.com/openai/v1", api_key="k"),
        provider_name="openai",
    )
    assert named.provider_name == "openai"  # given, so kept
