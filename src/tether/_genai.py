"""What the tracing wrappers share: GenAI semantic-convention names, error and usage
attributes, content in the conventions' JSON shape, and which server a client talks to.

The server part reads only what a client already holds: its base URL (``server.address``,
``server.port``) and, for an OpenAI-compatible endpoint, the provider it really is when
that can be known from the host (``api.groq.com`` is ``groq``) or from the response
(Ollama and llama.cpp's server sign theirs in ``system_fingerprint``).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider

from tether.errors import ProviderError
from tether.messages import Message, Text, ToolCall, ToolResult, Usage
from tether.tools import ToolSpec

TRACER_NAME = "tether"

# Attribute names of the GenAI semantic conventions, as published in the Python package
# opentelemetry-semantic-conventions 0.66b2 (pinned in the dev group; a test checks every
# name below against it).
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_TEMPERATURE = "gen_ai.request.temperature"
REQUEST_STREAM = "gen_ai.request.stream"
OUTPUT_TYPE = "gen_ai.output.type"
RESPONSE_ID = "gen_ai.response.id"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
USAGE_INPUT = "gen_ai.usage.input_tokens"
USAGE_OUTPUT = "gen_ai.usage.output_tokens"
USAGE_CACHE_READ = "gen_ai.usage.cache_read.input_tokens"
USAGE_CACHE_CREATION = "gen_ai.usage.cache_creation.input_tokens"
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
WORKFLOW_NAME = "gen_ai.workflow.name"
CONVERSATION_ID = "gen_ai.conversation.id"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"
OUTCOME = "tether.outcome"
"""Not a convention: the run's outcome kind (``completed``, ``turn_cap``...)."""

UNKNOWN_PROVIDER = "unknown"
GENERIC_PROVIDER = "openai"
"""What an OpenAI-protocol adapter calls itself before the server is known."""


def tracer(provider: TracerProvider | None) -> trace.Tracer:
    """tether's tracer from ``provider`` (the global one when ``None``)."""
    return trace.get_tracer(TRACER_NAME, tracer_provider=provider)


def find_attribute(client: Any, attribute: str) -> str | None:
    """A non-empty string attribute of the client or of a client it wraps."""
    for _ in range(32):
        value = getattr(client, attribute, None)
        if isinstance(value, str) and value:
            return value
        client = getattr(client, "inner", None)
        if client is None:
            break
    return None


# --- errors, usage and content -------------------------------------------------------------


def record_error(span: Span, exc: BaseException, kind: str | None = None) -> None:
    """Mark ``span`` as failed: ``error.type`` (``kind``, else :func:`error_type`),
    status ERROR, and the exception event."""
    span.set_attribute(ERROR_TYPE, kind or error_type(exc))
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
    if isinstance(exc, Exception):
        span.record_exception(exc)


def error_type(exc: BaseException) -> str:
    """A low-cardinality name for an error: a provider error's kind, ``timeout``,
    ``cancelled``, else the exception's class."""
    if isinstance(exc, ProviderError):
        return exc.kind
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
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
        span.set_attribute(USAGE_CACHE_CREATION, usage.cache_write_tokens)


def message_json(message: Message) -> dict[str, Any]:
    """One message in the conventions' JSON shape (``role`` and typed ``parts``)."""
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, Text):
            parts.append({"type": "text", "content": part.text})
        elif isinstance(part, ToolCall):
            parts.append(
                {
                    "type": "tool_call",
                    "id": part.id,
                    "name": part.name,
                    "arguments": call_arguments(part),
                }
            )
        elif isinstance(part, ToolResult):
            parts.append(
                {"type": "tool_call_response", "id": part.call_id, "response": part.content}
            )
    return {"role": message.role, "parts": parts}


def call_arguments(call: ToolCall) -> Any:
    """A call's arguments as the model sent them: the object, or the text if malformed."""
    return call.raw_arguments if call.malformed else dict(call.arguments)


def tool_json(spec: ToolSpec) -> dict[str, Any]:
    """A tool definition in the conventions' shape."""
    return {
        "type": "function",
        "name": spec.name,
        "description": spec.description,
        "parameters": dict(spec.parameters),
    }


def to_json(value: Any) -> str:
    """``value`` as a JSON string attribute."""
    return json.dumps(value, ensure_ascii=False, default=str)


# --- which server ----------------------------------------------------------------------------

_DEFAULT_PORTS = {"https": 443, "http": 80}

PROVIDERS_BY_HOST: Mapping[str, str] = {
    "api.openai.com": "openai",
    "api.anthropic.com": "anthropic",
    "api.groq.com": "groq",
    "api.deepseek.com": "deepseek",
    "api.mistral.ai": "mistral_ai",
    "api.x.ai": "x_ai",
    "api.perplexity.ai": "perplexity",
    "api.cohere.com": "cohere",
    "api.cohere.ai": "cohere",
    "api.moonshot.ai": "moonshot_ai",
    "api.moonshot.cn": "moonshot_ai",
    "generativelanguage.googleapis.com": "gcp.gemini",
}
"""Hosted APIs that speak an OpenAI-compatible protocol, by host, with the conventions'
well-known provider names."""

PROVIDERS_BY_HOST_SUFFIX: Mapping[str, str] = {".openai.azure.com": "azure.ai.openai"}

_LLAMA_CPP_BUILD = re.compile(r"b\d+-[0-9a-f]+")


def server_of(client: Any) -> tuple[str, int] | None:
    """``(host, port)`` of the server behind ``client`` (or a client it wraps), read from
    its ``base_url`` or its SDK client's; ``None`` for an in-process model."""
    for _ in range(32):
        url = getattr(client, "base_url", None) or getattr(
            getattr(client, "sdk", None), "base_url", None
        )
        if url:
            return _host_and_port(str(url))
        client = getattr(client, "inner", None)
        if client is None:
            break
    return None


def _host_and_port(url: str) -> tuple[str, int] | None:
    try:
        parts = urlsplit(url)
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:  # a port out of range or not a number
        return None
    if not parts.hostname or port is None:
        return None
    return parts.hostname, port


def provider_for_host(host: str) -> str | None:
    """The provider of a hosted API known by its host, else ``None``."""
    host = host.lower()
    named = PROVIDERS_BY_HOST.get(host)
    if named is not None:
        return named
    for suffix, name in PROVIDERS_BY_HOST_SUFFIX.items():
        if host.endswith(suffix):
            return name
    return None


def provider_from_response(raw: Any) -> str | None:
    """The self-hosted server that signed a Chat Completions response, else ``None``:
    ``ollama`` (``fp_ollama``) or ``llama.cpp`` (its build, ``b<number>-<commit>``)."""
    if not isinstance(raw, Mapping):
        return None
    fingerprint = raw.get("system_fingerprint")
    if not isinstance(fingerprint, str):
        return None
    if fingerprint == "fp_ollama":
        return "ollama"
    if _LLAMA_CPP_BUILD.fullmatch(fingerprint):
        return "llama.cpp"
    return None


def response_id(raw: Any) -> str | None:
    """The provider's id of a response (``chatcmpl-...``, ``msg_...``, ``resp_...``)."""
    value = raw.get("id") if isinstance(raw, Mapping) else getattr(raw, "id", None)
    return value if isinstance(value, str) and value else None
