"""Anthropic Messages adapter, built on the official SDK's ``AsyncAnthropic``.

Mapping (see ``docs/providers.md``): a tool is ``name``/``description``/``input_schema``
(``strict`` per tool); a :class:`~tether.messages.ToolCall` is a ``tool_use`` block (``id``,
``name``, ``input`` object); a tether ``tool`` message becomes a ``user`` message whose
``tool_result`` blocks come first, followed by the text of the next user message if there is
one; instructions go to ``system``. Prompt-cache breakpoints sit on the last tool, the system
prompt and the newest message, so each turn reuses the cache of the previous one.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anthropic

from tether.clients import (
    BaseChatClient,
    ChatOptions,
    ChatResponse,
    OutputSchema,
    ResponseDone,
    StreamChunk,
    TextDelta,
    ToolChoice,
    tool_choice_of,
)
from tether.errors import ProviderError
from tether.messages import Message, Part, StopReason, Text, ToolCall, Usage
from tether.providers._sdk_errors import translate
from tether.providers._wire_cache import WireCache
from tether.tools import ToolSpec

PROVIDER = "anthropic"
DEFAULT_MAX_TOKENS = 4096
BLOCKS_KEY = "anthropic_blocks"
"""Message metadata key holding the reply's provider-only blocks (thinking, redacted
thinking, compaction, server tool use and results), each with ``at``, the number of text
and tool-call blocks before it, so they are sent back verbatim and in place."""

_EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
WireMessage = tuple[str, tuple[dict[str, Any], ...]]


class AnthropicClient(BaseChatClient):
    """A :class:`~tether.clients.ChatClient` for the Anthropic Messages API.

    ``max_retries`` and ``timeout`` (seconds) are the SDK's own retry and timeout; a failure
    left after them is raised as :class:`~tether.errors.ProviderError`. ``max_tokens`` is
    used when the options carry no ``max_output_tokens`` (Anthropic requires one).
    ``cache=False`` sends no ``cache_control`` breakpoints.
    """

    provider_name = "anthropic"
    """The GenAI semantic-convention provider name, read by tracing."""
    round_trips_compaction = True
    """Compaction blocks come back in the message metadata and are sent again in place."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        cache: bool = True,
        cache_size: int = 4096,
        sdk: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.cache = cache
        self.timeout = timeout
        self.sdk = sdk or anthropic.AsyncAnthropic(
            api_key=api_key, base_url=base_url, max_retries=max_retries, timeout=timeout
        )
        self.wire: WireCache[WireMessage] = WireCache(_convert_message, cache_size)

    # --- the seam -------------------------------------------------------------------------

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        body = self.request_body(messages, tools, options)
        create: Any = self.sdk.messages.create
        try:
            reply = await create(**_sdk_arguments(body))
        except anthropic.AnthropicError as exc:
            raise self._translate(exc) from exc
        return parse_message(reply.to_dict(warnings=False))

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        body = self.request_body(messages, tools, options)
        create: Any = self.sdk.messages.create
        assembler = _StreamAssembler()
        try:
            events = await create(**_sdk_arguments(body), stream=True)
            async with events:
                async for event in events:
                    text = assembler.feed(event.to_dict(warnings=False))
                    if text:
                        yield TextDelta(text)
        except anthropic.AnthropicError as exc:
            raise self._translate(exc) from exc
        yield ResponseDone(parse_message(assembler.message()))

    # --- request ------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        await self.sdk.close()

    def request_body(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> dict[str, Any]:
        """The JSON body sent for this request (old messages come from the wire cache)."""
        body: dict[str, Any] = {
            "model": options.model or self.model,
            "max_tokens": options.max_output_tokens or self.max_tokens,
        }
        if options.instructions:
            system: dict[str, Any] = {"type": "text", "text": options.instructions}
            if self.cache:
                system["cache_control"] = _EPHEMERAL
            body["system"] = [system]
        if tools:
            wire_tools = [tool_to_wire(t) for t in tools]
            if self.cache:
                wire_tools[-1] = {**wire_tools[-1], "cache_control": _EPHEMERAL}
            body["tools"] = wire_tools
        choice = tool_choice_of(options, tools)
        if choice is not None:
            body["tool_choice"] = tool_choice_to_wire(choice)
        body["messages"] = self._messages(messages)
        if options.temperature is not None:
            body["temperature"] = options.temperature
        body.update(options.extra)
        if options.output_schema is not None:
            config = dict(body.get("output_config") or {})
            body["output_config"] = {**config, "format": output_format(options.output_schema)}
        return body

    def _messages(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for message in messages:
            role, blocks = self.wire(message)
            if not blocks:
                continue
            if out and out[-1]["role"] == "user" and role == "user":
                out[-1]["content"] = [*out[-1]["content"], *blocks]
            else:
                out.append({"role": role, "content": list(blocks)})
        if self.cache and out:
            last = out[-1]["content"]
            last[-1] = {**last[-1], "cache_control": _EPHEMERAL}
        return out

    def _translate(self, exc: anthropic.AnthropicError) -> ProviderError:
        return translate(anthropic, exc, PROVIDER, self.timeout, str(self.sdk.base_url))


# --- conversion (pure functions) ----------------------------------------------------------


def tool_to_wire(spec: ToolSpec) -> dict[str, Any]:
    """A tool definition: ``input_schema``, and ``strict`` with a closed schema if asked."""
    wire: dict[str, Any] = {"name": spec.name, "description": spec.description}
    if spec.strict:
        wire["input_schema"] = _closed(spec.parameters)
        wire["strict"] = True
    else:
        wire["input_schema"] = dict(spec.parameters)
    return wire


def tool_choice_to_wire(choice: ToolChoice) -> dict[str, Any]:
    """``auto``, ``required`` (``any``), ``none``, or a named ``tool``."""
    modes = {"auto": "auto", "required": "any", "none": "none"}
    if choice in modes:
        return {"type": modes[choice]}
    return {"type": "tool", "name": choice}


def output_format(output: OutputSchema) -> dict[str, Any]:
    """The ``output_config.format`` of a structured reply: the schema in the form the API
    accepts (the SDK's own ``transform_schema``: objects closed, constraints it cannot
    enforce moved into descriptions; the reply is still validated in full)."""
    return {"type": "json_schema", "schema": anthropic.transform_schema(dict(output.schema))}


def _closed(schema: Mapping[str, Any]) -> dict[str, Any]:
    def walk(node: Any) -> Any:
        if isinstance(node, Mapping):
            out = {k: walk(v) for k, v in node.items()}
            if out.get("type") == "object":
                out.setdefault("additionalProperties", False)
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    result: dict[str, Any] = walk(schema)
    return result


def _part_to_block(part: Part) -> dict[str, Any] | None:
    if isinstance(part, Text):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ToolCall):
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": dict(part.arguments)}
    block: dict[str, Any] = {
        "type": "tool_result",
        "tool_use_id": part.call_id,
        "content": part.content,
    }
    if part.is_error:
        block["is_error"] = True
    return block


def _convert_message(message: Message) -> WireMessage:
    """One tether message as (role, content blocks); tool results always come first."""
    blocks = [b for b in (_part_to_block(p) for p in message.parts) if b is not None]
    if message.role == "assistant":
        kept = message.metadata.get(BLOCKS_KEY)
        return "assistant", tuple(_in_place(blocks, kept) if kept else blocks)
    results = [b for b in blocks if b["type"] == "tool_result"]
    rest = [b for b in blocks if b["type"] != "tool_result"]
    return "user", (*results, *rest)


def _in_place(blocks: list[dict[str, Any]], kept: Any) -> list[dict[str, Any]]:
    """``blocks`` with each kept provider-only block put back where it came."""
    out: list[dict[str, Any]] = []
    pending = list(kept)
    for index, block in enumerate(blocks):
        out.extend(dict(e["block"]) for e in pending if int(e["at"]) == index)
        out.append(block)
    out.extend(dict(e["block"]) for e in pending if int(e["at"]) >= len(blocks))
    return out


def parse_message(data: Mapping[str, Any]) -> ChatResponse:
    """A :class:`ChatResponse` from a Messages API response body."""
    parts: list[Text | ToolCall] = []
    kept: list[dict[str, Any]] = []
    for block in data.get("content") or ():
        kind = block.get("type")
        if kind == "text":
            parts.append(Text(block.get("text", "")))
        elif kind == "tool_use":
            value = block.get("input")
            if isinstance(value, str):
                parts.append(ToolCall.from_json(block["id"], block["name"], value))
            elif isinstance(value, dict):
                parts.append(ToolCall(block["id"], block["name"], value))
            else:
                parts.append(ToolCall(block["id"], block["name"], {}, json.dumps(value)))
        else:  # provider-only: keep it to send back as it came
            kept.append({"at": len(parts), "block": dict(block)})
    metadata = {BLOCKS_KEY: kept} if kept else {}
    message = Message("assistant", tuple(parts), metadata)
    usage = data.get("usage") or {}
    return ChatResponse(
        (message,),
        StopReason.parse(data.get("stop_reason")),
        Usage(
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
            cache_write_tokens=int(usage.get("cache_creation_input_tokens") or 0),
            requests=1,
        ),
        data.get("model"),
        dict(data),
    )


def _sdk_arguments(body: Mapping[str, Any]) -> dict[str, Any]:
    """Body fields the SDK names go as arguments; the rest travel in ``extra_body``."""
    named = {"model", "max_tokens", "messages", "system", "tools", "tool_choice", "metadata"}
    named |= {"stop_sequences", "thinking", "service_tier", "output_config"}
    arguments = {k: v for k, v in body.items() if k in named}
    extra = {k: v for k, v in body.items() if k not in named}
    if extra:
        arguments["extra_body"] = extra
    return arguments


class _StreamAssembler:
    """Rebuilds the response body from the stream's events."""

    def __init__(self) -> None:
        self._message: dict[str, Any] = {"content": [], "usage": {}}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}

    def feed(self, event: Mapping[str, Any]) -> str:
        """Take one event; return the text it adds (empty if none)."""
        kind = event.get("type")
        if kind == "message_start":
            start = dict(event.get("message") or {})
            self._message.update({k: v for k, v in start.items() if k not in ("content",)})
            self._message["usage"] = dict(start.get("usage") or {})
        elif kind == "content_block_start":
            index = int(event["index"])
            self._blocks[index] = dict(event.get("content_block") or {})
            if self._blocks[index].get("type") == "tool_use":
                self._json[index] = []
        elif kind == "content_block_delta":
            return self._delta(int(event["index"]), event.get("delta") or {})
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            if "stop_reason" in delta:
                self._message["stop_reason"] = delta["stop_reason"]
            usage = {k: v for k, v in (event.get("usage") or {}).items() if v is not None}
            self._message["usage"] = {**self._message.get("usage", {}), **usage}
        return ""

    def _delta(self, index: int, delta: Mapping[str, Any]) -> str:
        block = self._blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            text = str(delta.get("text", ""))
            block["text"] = block.get("text", "") + text
            return text
        if kind == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json", "")))
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + str(delta.get("thinking", ""))
        elif kind == "signature_delta":
            block["signature"] = str(delta.get("signature", ""))
        elif kind == "compaction_delta":
            if delta.get("content") is not None:
                block["content"] = (block.get("content") or "") + str(delta["content"])
            if delta.get("encrypted_content") is not None:
                block["encrypted_content"] = delta["encrypted_content"]
        return ""

    def message(self) -> dict[str, Any]:
        """The assembled body; streamed tool inputs stay text, parsed by the caller."""
        content = []
        for index in sorted(self._blocks):
            block = dict(self._blocks[index])
            if index in self._json:
                block["input"] = "".join(self._json[index])
            content.append(block)
        return {**self._message, "content": content}
