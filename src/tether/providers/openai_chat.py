"""OpenAI-compatible Chat Completions adapter (Ollama, vLLM, llama.cpp server, LM Studio).

Built on the official SDK's ``AsyncOpenAI`` pointed at ``base_url``. Mapping (see
``docs/providers.md``): a tool is ``{"type": "function", "function": {...parameters}}``; a
:class:`~tether.messages.ToolCall` is an entry of the assistant message's ``tool_calls``
(``id``, ``function.name``, JSON-text ``function.arguments``); a tether ``tool`` message
becomes one ``role: tool`` message per result; instructions become a leading ``system``
message; ``finish_reason`` (``stop``, ``length``, ``tool_calls``, ``content_filter``, or
none at all) maps to :class:`~tether.messages.StopReason`.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal

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
    ToolChoice,
    tool_choice_of,
)
from tether.errors import ProviderError
from tether.messages import Message, StopReason, Text, ToolCall, Usage
from tether.providers._sdk_errors import translate
from tether.providers._wire_cache import WireCache
from tether.providers.openai_responses import strict_output_schema
from tether.tools import ToolSpec

PROVIDER = "openai-chat"
WireMessages = tuple[dict[str, Any], ...]
OutputMode = Literal["auto", "json_schema", "json_object"]
_UNSUPPORTED = re.compile(
    r"not supported|unsupported|must be one of|input should be|unknown (?:type|variant|value)"
    r"|invalid value|not implemented"
)
JSON_OBJECT_HELP = "Reply with one JSON object valid against this JSON schema, and nothing else:"


class OpenAIChatClient(BaseChatClient):
    """A :class:`~tether.clients.ChatClient` for any Chat Completions server.

    ``api_key`` may be any text for servers that do not check it. ``max_tokens_field``
    names the output ceiling (``max_tokens`` for most servers, ``max_completion_tokens``
    for OpenAI's newer models). ``stream_usage`` asks for a final usage chunk when
    streaming (``stream_options.include_usage``). ``output_mode`` says how a structured
    reply is asked for: ``json_schema`` (``response_format`` with the schema), ``json_object``
    (JSON mode, the schema in the instructions) or ``auto``: ``json_schema`` until the
    server rejects ``response_format`` with a 400 naming it, then ``json_object`` for this
    client's later requests.
    """

    provider_name = "openai"
    """The GenAI semantic-convention provider name, read by tracing."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        max_tokens_field: str = "max_tokens",
        stream_usage: bool = True,
        output_mode: OutputMode = "auto",
        cache_size: int = 4096,
        sdk: openai.AsyncOpenAI | None = None,
    ) -> None:
        self.model = model
        self.output_mode: OutputMode = output_mode
        self.timeout = timeout
        self.max_tokens_field = max_tokens_field
        self.stream_usage = stream_usage
        self.sdk = sdk or openai.AsyncOpenAI(
            api_key=api_key or "not-needed",
            base_url=base_url,
            max_retries=max_retries,
            timeout=timeout,
        )
        self.wire: WireCache[WireMessages] = WireCache(message_to_wire, cache_size)

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        body = self.request_body(messages, tools, options)
        create: Any = self.sdk.chat.completions.create
        try:
            reply = await create(**_sdk_arguments(body))
        except openai.OpenAIError as exc:
            error = self._translate(exc)
            if not self._falls_back(error, options):
                raise error from exc
            body = self.request_body(messages, tools, options)
            try:
                reply = await create(**_sdk_arguments(body))
            except openai.OpenAIError as again:
                raise self._translate(again) from again
        return check_tool_choice(body, parse_completion(reply.to_dict(warnings=False)))

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        body = self.request_body(messages, tools, options)
        if self.stream_usage:
            body["stream_options"] = {"include_usage": True}
        create: Any = self.sdk.chat.completions.create
        assembler = _StreamAssembler()
        try:
            try:
                chunks = await create(**_sdk_arguments(body), stream=True)
            except openai.OpenAIError as exc:
                error = self._translate(exc)
                if not self._falls_back(error, options):
                    raise error from exc
                body = {**self.request_body(messages, tools, options), **_stream_extra(body)}
                chunks = await create(**_sdk_arguments(body), stream=True)
            async with chunks:
                async for chunk in chunks:
                    text = assembler.feed(chunk.to_dict(warnings=False))
                    if text:
                        yield TextDelta(text)
        except openai.OpenAIError as exc:
            raise self._translate(exc) from exc
        if not assembler.seen_choice:
            raise ProviderError("openai-chat stream ended without any choice.")
        if self.stream_usage and assembler.usage is None:
            raise ProviderError(
                "the openai-chat server sent no usage in its stream although it was asked "
                "(stream_options.include_usage), so token limits cannot count this reply; "
                "use complete(), or OpenAIChatClient(stream_usage=False) to accept unknown usage",
                kind="other",
            )
        yield ResponseDone(check_tool_choice(body, parse_completion(assembler.completion())))

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        await self.sdk.close()

    def request_body(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> dict[str, Any]:
        """The JSON body sent for this request (old messages come from the wire cache)."""
        wire: list[dict[str, Any]] = []
        output = options.output_schema
        instructions = options.instructions
        if output is not None and self.output_mode == "json_object":
            instructions = json_object_instructions(instructions, output)
        if instructions:
            wire.append({"role": "system", "content": instructions})
        wire.extend(item for m in messages for item in self.wire(m))
        body: dict[str, Any] = {"model": options.model or self.model, "messages": wire}
        if tools:
            body["tools"] = [tool_to_wire(t) for t in tools]
        choice = tool_choice_of(options, tools)
        if choice is not None:
            body["tool_choice"] = tool_choice_to_wire(choice)
        if options.max_output_tokens is not None:
            body[self.max_tokens_field] = options.max_output_tokens
        if options.temperature is not None:
            body["temperature"] = options.temperature
        body.update(options.extra)
        if output is not None:
            body["response_format"] = response_format(output, self.output_mode)
        return body

    def _falls_back(self, error: ProviderError, options: ChatOptions) -> bool:
        """Whether to retry a rejected structured request in JSON mode (and remember it)."""
        if options.output_schema is None or self.output_mode != "auto":
            return False
        if not rejects_json_schema(error):
            return False
        self.output_mode = "json_object"
        return True

    def _translate(self, exc: openai.OpenAIError) -> ProviderError:
        return translate(openai, exc, PROVIDER, self.timeout, str(self.sdk.base_url))


def tool_to_wire(spec: ToolSpec) -> dict[str, Any]:
    """A function tool; ``strict`` only when the tool asks for it (servers vary)."""
    function: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "parameters": dict(spec.parameters),
    }
    if spec.strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def tool_choice_to_wire(choice: ToolChoice) -> str | dict[str, Any]:
    """``auto``, ``required`` and ``none`` as they are; a tool's name as a named function."""
    if choice in TOOL_CHOICE_MODES:
        return choice
    return {"type": "function", "function": {"name": choice}}


def check_tool_choice(body: Mapping[str, Any], response: ChatResponse) -> ChatResponse:
    """``response``, unless it breaks the request's ``tool_choice``: some servers ignore it,
    or tools altogether (llama.cpp for a chat template without tool support)."""
    wire = body.get("tool_choice")
    choice = wire.get("function", {}).get("name") if isinstance(wire, dict) else wire
    if not isinstance(choice, str) or choice == "auto" or response.stop_reason.truncated:
        return response
    names = [c.name for c in response.message.tool_calls]
    if names:
        named_other = choice not in ("none", "required") and any(n != choice for n in names)
        if choice != "none" and not named_other:
            return response
        wrong = f"called {', '.join(names)}"
    elif choice == "none":
        return response
    else:
        wrong = "answered without a tool call"
    raise ProviderError(
        f"the openai-chat server {wrong} although tool_choice was {choice!r}: it ignores "
        "tool_choice, or tools altogether, for this model; use a model whose chat template "
        "supports tools, or wrap the client in tether.constrained.ConstrainedToolCalling",
        kind="other",
        usage=response.usage,
    )


def response_format(output: OutputSchema, mode: OutputMode = "json_schema") -> dict[str, Any]:
    """The ``response_format`` of a structured reply: the schema (strict when it can be), or
    plain JSON mode."""
    if mode == "json_object":
        return {"type": "json_object"}
    schema, strict = strict_output_schema(output.schema)
    spec: dict[str, Any] = {"name": output.name}
    if output.description:
        spec["description"] = output.description
    spec.update(schema=schema, strict=strict)
    return {"type": "json_schema", "json_schema": spec}


def json_object_instructions(instructions: str | None, output: OutputSchema) -> str:
    """The instructions with the schema spelled out, for JSON mode (which carries none)."""
    schema = json.dumps(output.schema, ensure_ascii=False)
    head = f"{instructions.rstrip()}\n\n" if instructions else ""
    return f"{head}{JSON_OBJECT_HELP}\n{schema}"


def rejects_json_schema(error: ProviderError) -> bool:
    """Whether a failure is a server saying it does not take a JSON-schema
    ``response_format``: a 400/422 whose message names ``response_format`` or
    ``json_schema`` and says it is not supported (llama.cpp: "must be one of"; pydantic
    servers: "Input should be 'text' or 'json_object'"). A schema the server finds invalid
    is not that: it is raised as is."""
    if error.kind != "bad_request":
        return False
    text = str(error).lower()
    names = "response_format" in text or "json_schema" in text
    return names and _UNSUPPORTED.search(text) is not None


def _stream_extra(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k == "stream_options"}


def message_to_wire(message: Message) -> WireMessages:
    """One tether message as Chat Completions messages (one per result for ``tool``)."""
    if message.role == "tool":
        out = [
            {"role": "tool", "tool_call_id": r.call_id, "content": r.content}
            for r in message.tool_results
        ]
        if message.text:
            out.append({"role": "user", "content": message.text})
        return tuple(out)
    if message.role == "user":
        return ({"role": "user", "content": message.text},)
    # "" rather than null: llama-cpp-python's server (and others) reject a null content
    wire: dict[str, Any] = {"role": "assistant", "content": message.text}
    calls = message.tool_calls
    if calls:
        wire["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments_json()},
            }
            for c in calls
        ]
    return (wire,)


def parse_completion(data: Mapping[str, Any]) -> ChatResponse:
    """A :class:`ChatResponse` from a Chat Completions response body."""
    choices = data.get("choices") or [{}]
    choice = choices[0]
    message = choice.get("message") or {}
    parts: list[Text | ToolCall] = []
    if message.get("content"):
        parts.append(Text(str(message["content"])))
    refusal = message.get("refusal")
    if refusal:
        parts.append(Text(str(refusal)))
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        arguments = function.get("arguments")
        name, call_id = str(function.get("name", "")), str(call.get("id") or "")
        if isinstance(arguments, dict):  # some local servers send an object
            parts.append(ToolCall(call_id, name, arguments))
        else:
            parts.append(ToolCall.from_json(call_id, name, str(arguments or "")))
    finish = choice.get("finish_reason")
    stop = StopReason("refusal", "refusal") if refusal else StopReason.parse(finish)
    usage = data.get("usage") or {}
    cached = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return ChatResponse(
        (Message("assistant", tuple(parts)),),
        stop,
        Usage(
            input_tokens=int(usage.get("prompt_tokens") or 0) - cached,
            output_tokens=int(usage.get("completion_tokens") or 0),
            cache_read_tokens=cached,
            requests=1,
        ),
        data.get("model"),
        dict(data),
    )


class _StreamAssembler:
    """Rebuilds a completion body from streamed chunks (tool calls by ``index``)."""

    def __init__(self) -> None:
        self.seen_choice = False
        self._text: list[str] = []
        self._refusal: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self._model: str | None = None
        self._signature: dict[str, Any] = {}  # the response's id and system_fingerprint

    def feed(self, chunk: Mapping[str, Any]) -> str:
        """Take one chunk; return the text it adds (empty if none)."""
        self._model = chunk.get("model") or self._model
        self._signature.update((k, chunk[k]) for k in ("id", "system_fingerprint") if chunk.get(k))
        if chunk.get("usage"):
            self.usage = dict(chunk["usage"])
        text = ""
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            self.seen_choice = True
            delta = choice.get("delta") or {}
            text = str(delta.get("content") or "")
            self._text.append(text)
            self._refusal.append(str(delta.get("refusal") or ""))
            for call in delta.get("tool_calls") or ():
                self._add_call(call)
            self._finish = choice.get("finish_reason") or self._finish
        return text

    def _add_call(self, call: Mapping[str, Any]) -> None:
        slot = self._calls.setdefault(int(call.get("index", len(self._calls))), {})
        slot["id"] = slot.get("id") or call.get("id")
        function = call.get("function") or {}
        if function.get("name"):
            slot["name"] = slot.get("name", "") + str(function["name"])
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            slot["arguments"] = arguments
        elif arguments:
            slot["arguments"] = slot.get("arguments", "") + str(arguments)

    def completion(self) -> dict[str, Any]:
        """The assembled body, in the non-streaming shape."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text)}
        if any(self._refusal):
            message["refusal"] = "".join(self._refusal)
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": slot.get("id"),
                    "type": "function",
                    "function": {"name": slot.get("name", ""), "arguments": slot.get("arguments")},
                }
                for _, slot in sorted(self._calls.items())
            ]
        choice = {"index": 0, "message": message, "finish_reason": self._finish}
        body = {"model": self._model, "choices": [choice], "usage": self.usage}
        return {**self._signature, **body}


def _sdk_arguments(body: Mapping[str, Any]) -> dict[str, Any]:
    """Body fields the SDK names go as arguments; the rest travel in ``extra_body``."""
    named = {"model", "messages", "tools", "temperature", "stream_options", "tool_choice"}
    named |= {"response_format"}
    named |= {"max_tokens", "max_completion_tokens", "parallel_tool_calls"}
    arguments = {k: v for k, v in body.items() if k in named}
    extra = {k: v for k, v in body.items() if k not in named}
    if extra:
        arguments["extra_body"] = extra
    return arguments
