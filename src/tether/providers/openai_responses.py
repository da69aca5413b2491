"""OpenAI Responses adapter, built on the official SDK's ``AsyncOpenAI``.

Mapping (see ``docs/providers.md``): a tool is a ``function`` tool with ``parameters``,
strict whenever the schema can be made strict-compatible; a
:class:`~tether.messages.ToolCall` is a ``function_call`` item (``call_id``, JSON-text
``arguments``); a result is a ``function_call_output`` item; instructions go to
``instructions``. Requests are stateless (``store: false``): the full history is resent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import openai

from tether.clients import (
    TOOL_CHOICE_MODES,
    BaseChatClient,
    ChatOptions,
    ChatResponse,
    OutputSchema,
    ResponseDone,
    StreamChunk,
    TextDelta,
    tool_choice_of,
)
from tether.errors import ProviderError
from tether.messages import Message, StopReason, Text, ToolCall, Usage
from tether.providers._sdk_errors import status_error, translate
from tether.providers._wire_cache import WireCache
from tether.tools import ToolSpec, strict_schema

PROVIDER = "openai"
REASONING_KEY = "openai_reasoning"
"""Message metadata key holding encrypted reasoning items, sent back before the calls."""
WireItems = tuple[dict[str, Any], ...]
_REASONING_FIELDS = ("type", "id", "summary", "encrypted_content")
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


class OpenAIResponsesClient(BaseChatClient):
    """A :class:`~tether.clients.ChatClient` for the OpenAI Responses API.

    ``max_retries`` and ``timeout`` (seconds) are the SDK's own; a failure left after them
    is raised as :class:`~tether.errors.ProviderError`. ``strict_tools=False`` never asks
    for strict function calling. ``keep_reasoning=True`` (reasoning models) asks for the
    encrypted reasoning items and sends them back with the calls they led to, which
    stateless requests otherwise lose.
    """

    provider_name = "openai"
    """The GenAI semantic-convention provider name, read by tracing."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        strict_tools: bool = True,
        keep_reasoning: bool = False,
        cache_size: int = 4096,
        sdk: openai.AsyncOpenAI | None = None,
    ) -> None:
        self.model = model
        self.timeout = timeout
        self.strict_tools = strict_tools
        self.keep_reasoning = keep_reasoning
        self.sdk = sdk or openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
        )
        self.wire: WireCache[WireItems] = WireCache(message_to_items, cache_size)

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        body, nullable = self._request(messages, tools, options)
        create: Any = self.sdk.responses.create
        try:
            reply = await create(**_sdk_arguments(body))
        except openai.OpenAIError as exc:
            raise self._translate(exc) from exc
        return parse_response(reply.to_dict(warnings=False), nullable)

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        body, nullable = self._request(messages, tools, options)
        create: Any = self.sdk.responses.create
        items: list[dict[str, Any]] = []
        final: dict[str, Any] | None = None
        try:
            events = await create(**_sdk_arguments(body), stream=True)
            async with events:
                async for raw in events:
                    event = raw.to_dict(warnings=False)
                    kind = event.get("type")
                    if kind == "response.output_text.delta" and event.get("delta"):
                        yield TextDelta(str(event["delta"]))
                    elif kind == "response.output_item.done":
                        items.append(dict(event.get("item") or {}))
                    elif kind in _TERMINAL:
                        final = dict(event.get("response") or {})
                    elif kind == "error":
                        raise status_error(PROVIDER, None, {"error": event})
        except openai.OpenAIError as exc:
            raise self._translate(exc) from exc
        if final is None:
            raise ProviderError("openai stream ended without a final response event.")
        if not final.get("output"):
            final["output"] = items
        yield ResponseDone(parse_response(final, nullable))

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        await self.sdk.close()

    def request_body(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> dict[str, Any]:
        """The JSON body sent for this request (old messages come from the wire cache)."""
        return self._request(messages, tools, options)[0]

    def _request(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> tuple[dict[str, Any], dict[str, frozenset[str]]]:
        body: dict[str, Any] = {"model": options.model or self.model, "store": False}
        if options.instructions:
            body["instructions"] = options.instructions
        body["input"] = [item for m in messages for item in self.wire(m)]
        nullable: dict[str, frozenset[str]] = {}
        if tools:
            body["tools"] = []
            for spec in tools:
                wire, added = tool_to_wire(spec, self.strict_tools)
                body["tools"].append(wire)
                if added:
                    nullable[spec.name] = added
        choice = tool_choice_of(options, tools)
        if choice is not None:
            named = {"type": "function", "name": choice}
            body["tool_choice"] = choice if choice in TOOL_CHOICE_MODES else named
        if self.keep_reasoning:
            body["include"] = ["reasoning.encrypted_content"]
        if options.max_output_tokens is not None:
            body["max_output_tokens"] = options.max_output_tokens
        if options.temperature is not None:
            body["temperature"] = options.temperature
        body.update(options.extra)
        if options.output_schema is not None:
            text = dict(body.get("text") or {})
            body["text"] = {**text, "format": output_format(options.output_schema)}
        return body, nullable

    def _translate(self, exc: openai.OpenAIError) -> ProviderError:
        return translate(openai, exc, PROVIDER, self.timeout, str(self.sdk.base_url))


# --- tools: strict when possible ----------------------------------------------------------


def tool_to_wire(spec: ToolSpec, try_strict: bool = True) -> tuple[dict[str, Any], frozenset[str]]:
    """A function tool, and the optional top-level parameters made nullable for strict mode.

    Strict mode needs every object closed and every property required; an optional
    top-level parameter becomes required-but-nullable, and a ``null`` the model sends for it
    is dropped again when the call is read. Schemas that cannot be made strict (open
    objects, optional nested properties, untyped optional parameters) are sent non-strict.
    """
    wire: dict[str, Any] = {"type": "function", "name": spec.name}
    wire["description"] = spec.description
    strict = strict_parameters(spec.parameters) if try_strict else None
    if strict is None:
        wire.update(parameters=dict(spec.parameters), strict=False)
        return wire, frozenset()
    parameters, added = strict
    wire.update(parameters=parameters, strict=True)
    return wire, added


def output_format(output: OutputSchema) -> dict[str, Any]:
    """The ``text.format`` of a structured reply: a JSON schema, strict when it can be."""
    schema, strict = strict_output_schema(output.schema)
    wire: dict[str, Any] = {"type": "json_schema", "name": output.name}
    if output.description:
        wire["description"] = output.description
    wire.update(schema=schema, strict=strict)
    return wire


def strict_output_schema(schema: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """An output schema in strict form and ``True``, or as it is and ``False`` when it
    cannot be strict (the same rules as tools; shared definitions must be closable too).
    Optional top-level properties become nullable; the caller drops a ``null`` sent for one."""
    defs = schema.get("$defs") or {}
    strict = strict_parameters(schema) if all(_closable(d) for d in defs.values()) else None
    return (dict(schema), False) if strict is None else (strict[0], True)


def strict_parameters(schema: Mapping[str, Any]) -> tuple[dict[str, Any], frozenset[str]] | None:
    """The strict form of a tool's parameters and the names made nullable, or ``None``."""
    if schema.get("type") != "object" or not _closable(schema, top=True):
        return None
    required = set(schema.get("required") or ())
    properties = dict(schema.get("properties") or {})
    added: set[str] = set()
    for name, prop in properties.items():
        if name not in required and not _accepts_null(prop):
            nullable = _nullable(prop)
            if nullable is None:
                return None
            properties[name] = nullable
            added.add(name)
    strict = strict_schema({**schema, "properties": properties})
    return strict, frozenset(added)


def _closable(node: Any, top: bool = False) -> bool:
    """Objects have fixed properties, and below the top every property is required."""
    if isinstance(node, list):
        return all(_closable(v) for v in node)
    if not isinstance(node, Mapping):
        return True
    if node.get("type") == "object":
        if node.get("additionalProperties") not in (None, False) or "properties" not in node:
            return False
        if not top and set(node.get("required") or ()) != set(node["properties"]):
            return False
        return all(_closable(v) for v in node["properties"].values())
    return all(_closable(v) for k, v in node.items() if k != "properties")


def _accepts_null(prop: Any) -> bool:
    if not isinstance(prop, Mapping):
        return False
    kind = prop.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    return any(_accepts_null(v) for v in prop.get("anyOf") or ())


def _nullable(prop: Any) -> dict[str, Any] | None:
    if not isinstance(prop, Mapping):
        return None
    out = {k: v for k, v in prop.items() if k != "default"}
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = [kind, "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    if "anyOf" in out:
        out["anyOf"] = [*out["anyOf"], {"type": "null"}]
        return out
    return None


# --- messages -----------------------------------------------------------------------------


def message_to_items(message: Message) -> WireItems:
    """One tether message as Responses input items, in part order."""
    items: list[dict[str, Any]] = [dict(r) for r in message.metadata.get(REASONING_KEY, ())]
    text = message.text
    if message.role in ("user", "assistant") and text:
        items.append({"role": message.role, "content": text})
    for call in message.tool_calls:
        items.append(
            {
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments_json(),
            }
        )
    for result in message.tool_results:
        items.append(
            {"type": "function_call_output", "call_id": result.call_id, "output": result.content}
        )
    if message.role == "tool" and text:
        items.append({"role": "user", "content": text})
    return tuple(items)


def parse_response(
    data: Mapping[str, Any], nullable: Mapping[str, frozenset[str]] | None = None
) -> ChatResponse:
    """A :class:`ChatResponse` from a Responses API response body."""
    status = data.get("status")
    if status == "failed":
        raise status_error(PROVIDER, None, {"error": data.get("error") or {}})
    parts: list[Text | ToolCall] = []
    reasoning: list[dict[str, Any]] = []
    refused = False
    for item in data.get("output") or ():
        kind = item.get("type")
        if kind == "message":
            for content in item.get("content") or ():
                if content.get("type") == "output_text" and content.get("text"):
                    parts.append(Text(str(content["text"])))
                elif content.get("type") == "refusal":
                    refused = True
                    parts.append(Text(str(content.get("refusal", ""))))
        elif kind == "function_call":
            call = ToolCall.from_json(
                str(item.get("call_id") or item.get("id") or ""),
                str(item.get("name", "")),
                str(item.get("arguments") or ""),
            )
            parts.append(_drop_added_nulls(call, (nullable or {}).get(call.name)))
        elif kind == "reasoning" and item.get("encrypted_content"):
            reasoning.append({k: item[k] for k in _REASONING_FIELDS if k in item})
    usage = data.get("usage") or {}
    cached = int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0)
    return ChatResponse(
        (Message("assistant", tuple(parts), {REASONING_KEY: reasoning} if reasoning else {}),),
        _stop_reason(status, data.get("incomplete_details"), refused, parts),
        Usage(
            input_tokens=int(usage.get("input_tokens") or 0) - cached,
            output_tokens=int(usage.get("output_tokens") or 0),
            cache_read_tokens=cached,
            requests=1,
        ),
        data.get("model"),
        dict(data),
    )


def _stop_reason(
    status: Any, incomplete: Any, refused: bool, parts: Sequence[Text | ToolCall]
) -> StopReason:
    if status == "incomplete":
        reason = (incomplete or {}).get("reason")
        if reason == "max_output_tokens":
            return StopReason("max_tokens", reason)
        if reason == "content_filter":
            return StopReason("content_filter", reason)
        return StopReason("unknown", str(reason or status))
    if refused:
        return StopReason("refusal", "refusal")
    if status == "completed":
        has_calls = any(isinstance(p, ToolCall) for p in parts)
        return StopReason("tool_calls" if has_calls else "stop", status)
    return StopReason.parse(status)


def _drop_added_nulls(call: ToolCall, added: frozenset[str] | None) -> ToolCall:
    if not added or call.malformed:
        return call
    arguments = {k: v for k, v in call.arguments.items() if not (v is None and k in added)}
    if len(arguments) == len(call.arguments):
        return call
    return ToolCall(call.id, call.name, arguments)


def _sdk_arguments(body: Mapping[str, Any]) -> dict[str, Any]:
    """Body fields the SDK names go as arguments; the rest travel in ``extra_body``."""
    named = {"model", "input", "instructions", "tools", "store", "max_output_tokens"}
    named |= {"temperature", "tool_choice", "parallel_tool_calls", "reasoning", "include", "text"}
    arguments = {k: v for k, v in body.items() if k in named}
    extra = {k: v for k, v in body.items() if k not in named}
    if extra:
        arguments["extra_body"] = extra
    return arguments
