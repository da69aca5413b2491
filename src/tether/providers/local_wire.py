"""The OpenAI Chat Completions wire of the local server: requests in, replies out.

:func:`parse_request` reads a request into tether messages, tools and options and refuses,
with :class:`BadRequest` (HTTP 400), anything the server could not honour exactly: more
than one choice, a reply ceiling outside 1..``max_tokens_ceiling``, a tool whose parameters
are not a usable JSON schema (not an object, invalid, a ``$ref`` to nothing), an unknown
``tool_choice``. :func:`completion_body` and :func:`stream_events` write the replies.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from tether.clients import (
    TOOL_CHOICE_MODES,
    ChatClient,
    ChatOptions,
    ChatResponse,
    ResponseDone,
    TextDelta,
    ToolChoice,
    tool_choice_of,
)
from tether.constrained import JSON_SCHEMA
from tether.errors import ConfigError, ProviderError, TetherError
from tether.messages import Message, Part, Text, ToolCall, ToolResult
from tether.providers._wire_schema import schema_problem
from tether.tools import ToolSpec

MAX_TOKENS_CEILING = 2048
"""The most reply tokens one request may ask for: one request at a time runs on the model,
so a huge one would keep every other client waiting."""


class BadRequest(Exception):
    """A request this server cannot read."""


# --- OpenAI wire -> tether ------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    raise BadRequest("message content must be a string or a list of text parts")


def parse_request(
    body: Mapping[str, Any], max_tokens_ceiling: int = MAX_TOKENS_CEILING
) -> tuple[list[Message], list[ToolSpec], ChatOptions]:
    """An OpenAI chat-completions request as tether messages, tools and options; raises
    :class:`BadRequest` for anything this server cannot honour exactly."""
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise BadRequest("'messages' must be a non-empty list")
    instructions: list[str] = []
    messages: list[Message] = []
    for m in raw_messages:
        role = m.get("role") if isinstance(m, dict) else None
        if role in ("system", "developer"):
            instructions.append(_content_text(m.get("content")))
        elif role == "user":
            messages.append(Message.user(_content_text(m.get("content"))))
        elif role == "assistant":
            messages.append(_assistant(m))
        elif role == "tool":
            result = ToolResult(str(m.get("tool_call_id", "")), _content_text(m.get("content")))
            if messages and messages[-1].role == "tool":
                last = messages.pop()
                messages.append(Message("tool", (*last.parts, result)))
            else:
                messages.append(Message.results([result]))
        else:
            raise BadRequest(f"unknown message role {role!r}")
    n = body.get("n", 1)
    if n is not None and n != 1:
        raise BadRequest(f"n must be 1: this server returns one choice, not {n!r}")
    tools = _tools(body.get("tools") or [])
    extra: dict[str, Any] = {}
    schema = _response_schema(body.get("response_format"))
    if schema is not None:
        extra[JSON_SCHEMA] = schema
    temperature = body.get("temperature")
    options = ChatOptions(
        instructions="\n\n".join(instructions) or None,
        max_output_tokens=_max_tokens(body, max_tokens_ceiling),
        temperature=float(temperature) if temperature is not None else None,
        extra=extra,
        tool_choice=_tool_choice(body.get("tool_choice")),
    )
    try:
        tool_choice_of(options, tools)
    except ConfigError as exc:
        raise BadRequest(str(exc)) from exc
    return messages, tools, options


def _max_tokens(body: Mapping[str, Any], ceiling: int) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= ceiling:
            raise BadRequest(f"{key} must be a whole number from 1 to {ceiling}, not {value!r}")
        return value
    return None


def _tool_choice(raw: Any) -> ToolChoice | None:
    if raw is None or (isinstance(raw, str) and raw in TOOL_CHOICE_MODES):
        return raw
    named = isinstance(raw, dict) and raw.get("type") == "function"
    function = raw.get("function") if named else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not name:
        raise BadRequest(
            "tool_choice must be 'auto', 'required', 'none' or "
            "{'type': 'function', 'function': {'name': ...}}"
        )
    return name


def _assistant(m: Mapping[str, Any]) -> Message:
    parts: list[Part] = []
    text = _content_text(m.get("content"))
    if text:
        parts.append(Text(text))
    for call in m.get("tool_calls") or []:
        function = call.get("function") or {}
        parts.append(
            ToolCall.from_json(
                str(call.get("id", "")),
                str(function.get("name", "")),
                str(function.get("arguments") or ""),
            )
        )
    return Message("assistant", tuple(parts))


def _tools(raw: Any) -> list[ToolSpec]:
    if not isinstance(raw, list):
        raise BadRequest("'tools' must be a list")
    specs = []
    for t in raw:
        function = t.get("function") if isinstance(t, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise BadRequest("each tool must be {'type': 'function', 'function': {'name': ...}}")
        name = function["name"]
        parameters = function.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        problem = schema_problem(parameters)
        if problem:
            raise BadRequest(f"the parameters of tool {name!r} are not a usable schema: {problem}")
        description = function.get("description") or ""
        specs.append(ToolSpec(name, str(description), parameters, False))
    return specs


def _response_schema(fmt: Any) -> dict[str, Any] | None:
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt["type"] == "json_object":
        return {"type": "object"}
    if fmt["type"] == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        problem = schema_problem(schema)
        if problem:
            raise BadRequest(f"response_format's schema is not a usable schema: {problem}")
        if isinstance(schema, dict):
            return schema
    raise BadRequest("response_format must be text, json_object or json_schema with a schema")


# --- tether -> OpenAI wire ------------------------------------------------------------------


def _finish_reason(response: ChatResponse) -> str:
    if response.stop_reason.truncated:
        return "length"
    return "tool_calls" if response.message.tool_calls else "stop"


def _wire_calls(response: ChatResponse) -> list[dict[str, Any]]:
    return [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": c.arguments_json()},
        }
        for c in response.message.tool_calls
    ]


def _usage(response: ChatResponse) -> dict[str, int]:
    u = response.usage
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.input_tokens + u.output_tokens,
    }


def completion_body(response: ChatResponse, model: str) -> dict[str, Any]:
    """A ``chat.completion`` object for ``response``."""
    message: dict[str, Any] = {"role": "assistant", "content": response.message.text or None}
    calls = _wire_calls(response)
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _finish_reason(response),
                "logprobs": None,
            }
        ],
        "usage": _usage(response),
    }


def _chunk(cid: str, model: str, delta: dict[str, Any], finish: str | None = None) -> str:
    body = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


async def stream_events(
    client: ChatClient,
    request: tuple[list[Message], list[ToolSpec], ChatOptions],
    model: str,
    include_usage: bool,
) -> AsyncIterator[str]:
    """Server-sent events of a streamed completion, ending with ``data: [DONE]``.

    Nothing is yielded before the client's first chunk, so a failure until then raises
    (the caller answers with an HTTP error); a later failure ends the stream with an
    ``error`` event, which OpenAI SDKs raise.
    """
    cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    chunks = aiter(client.stream(*request))
    first = await anext(chunks, None)
    yield _chunk(cid, model, {"role": "assistant", "content": ""})
    final: ChatResponse | None = None
    try:
        item = first
        while item is not None:
            if isinstance(item, TextDelta):
                yield _chunk(cid, model, {"content": item.text})
            elif isinstance(item, ResponseDone):
                final = item.response
            item = await anext(chunks, None)
        if final is None:
            raise ProviderError("the stream ended without a response")
    except TetherError as exc:
        error = {"message": str(exc), "type": "server_error", "code": None}
        yield f"data: {json.dumps({'error': error}, ensure_ascii=False)}\n\n"
        return
    calls = _wire_calls(final)
    if calls:
        yield _chunk(cid, model, {"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]})
    yield _chunk(cid, model, {}, _finish_reason(final))
    if include_usage:
        usage = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [],
            "usage": _usage(final),
        }
        yield f"data: {json.dumps(usage)}\n\n"
    yield "data: [DONE]\n\n"
