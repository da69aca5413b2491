"""The local model over an OpenAI-compatible HTTP endpoint, on 127.0.0.1 by default.

``POST /v1/chat/completions`` (plain and streaming) and ``GET /v1/models``. With ``tools``
or ``response_format`` the reply is decoded under the same JSON-schema constraint as in
process (:class:`~tether.constrained.ConstrainedToolCalling` over
:class:`~tether.providers.local.LocalClient`), so any OpenAI client gets well-formed tool
calls from a model that has no native tool support.

Written on Starlette and uvicorn rather than ``llama_cpp.server``: that server needs
FastAPI and ``starlette-context`` on top, and its tool calling for models without a
function-calling template does not constrain arguments to each tool's schema.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.responses import Response

from tether.clients import ChatClient, ChatOptions, ChatResponse, ResponseDone, TextDelta
from tether.constrained import JSON_SCHEMA
from tether.errors import ContextWindowExceeded, ProviderError, TetherError
from tether.messages import Message, Part, Text, ToolCall, ToolResult
from tether.tools import ToolSpec

DEFAULT_PORT = 8765


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


def parse_request(body: Mapping[str, Any]) -> tuple[list[Message], list[ToolSpec], ChatOptions]:
    """An OpenAI chat-completions request as tether messages, tools and options."""
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
    tools = [] if body.get("tool_choice") == "none" else _tools(body.get("tools") or [])
    extra: dict[str, Any] = {}
    schema = _response_schema(body.get("response_format"))
    if schema is not None:
        extra[JSON_SCHEMA] = schema
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    temperature = body.get("temperature")
    options = ChatOptions(
        instructions="\n\n".join(instructions) or None,
        max_output_tokens=int(max_tokens) if max_tokens else None,
        temperature=float(temperature) if temperature is not None else None,
        extra=extra,
    )
    return messages, tools, options


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


def _tools(raw: list[Any]) -> list[ToolSpec]:
    specs = []
    for t in raw:
        function = t.get("function") if isinstance(t, dict) else None
        if not isinstance(function, dict) or not function.get("name"):
            raise BadRequest("each tool must be {'type': 'function', 'function': {'name': ...}}")
        parameters = function.get("parameters") or {"type": "object", "properties": {}}
        specs.append(ToolSpec(function["name"], function.get("description", ""), parameters, False))
    return specs


def _response_schema(fmt: Any) -> dict[str, Any] | None:
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt["type"] == "json_object":
        return {"type": "object"}
    if fmt["type"] == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
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
    """Server-sent events of a streamed completion, ending with ``data: [DONE]``."""
    cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    yield _chunk(cid, model, {"role": "assistant", "content": ""})
    final: ChatResponse | None = None
    async for item in client.stream(*request):
        if isinstance(item, TextDelta):
            yield _chunk(cid, model, {"content": item.text})
        elif isinstance(item, ResponseDone):
            final = item.response
    if final is None:
        raise ProviderError("the stream ended without a response")
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


# --- the app --------------------------------------------------------------------------------


def _error(message: str, status: int, code: str | None = None) -> Response:
    from starlette.responses import JSONResponse

    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": code}}, status)


def create_app(client: ChatClient | None = None, model: str | None = None) -> Any:
    """The Starlette app serving ``client`` (default: the local model, constrained)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    if client is None:
        from tether.providers.local import demo_client

        client = demo_client()
    name = str(model or getattr(getattr(client, "inner", client), "model_name", "local"))
    served: ChatClient = client

    async def models(request: Request) -> Response:
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "tether"}]
        return JSONResponse({"object": "list", "data": data})

    async def chat(request: Request) -> Response:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise BadRequest("the request body must be a JSON object")
            parsed = parse_request(body)
        except (ValueError, BadRequest, AttributeError, TypeError) as exc:
            return _error(f"bad request: {exc}", 400)
        try:
            if body.get("stream"):
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                events = stream_events(served, parsed, name, usage)
                return StreamingResponse(events, media_type="text/event-stream")
            response = await served.complete(*parsed)
        except ContextWindowExceeded as exc:
            return _error(str(exc), 400, "context_length_exceeded")
        except ProviderError as exc:
            return _error(str(exc), exc.status or (400 if exc.kind == "bad_request" else 500))
        except TetherError as exc:
            return _error(str(exc), 500)
        return JSONResponse(completion_body(response, name))

    routes = [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
    ]
    return Starlette(routes=routes)


@contextlib.asynccontextmanager
async def running_server(
    client: ChatClient | None = None, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Serve in this event loop while the block runs; yields the base URL (``.../v1``).
    ``port=0`` picks a free port."""
    import asyncio

    import uvicorn

    config = uvicorn.Config(create_app(client), host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise ProviderError(f"the local server did not start on {host}:{port}")
        await asyncio.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}/v1"
    finally:
        server.should_exit = True
        await task


def serve_local(host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> None:
    """Serve the local model until interrupted (blocks); prints the banner first."""
    import uvicorn

    from tether.providers.local import LocalClient, demo_client

    client = demo_client()
    inner = client.inner
    banner = inner.banner() if isinstance(inner, LocalClient) else ""
    print(banner)
    print(f"OpenAI-compatible endpoint: http://{host}:{port}/v1 (any api_key)")
    uvicorn.run(create_app(client), host=host, port=port, log_level="warning")
