"""The local model over an OpenAI-compatible HTTP endpoint, on 127.0.0.1 by default.

``POST /v1/chat/completions`` (plain and streaming) and ``GET /v1/models``. With ``tools``
or ``response_format`` the reply is decoded under the same JSON-schema constraint as in
process (:class:`~tether.constrained.ConstrainedToolCalling` over
:class:`~tether.providers.local.LocalClient`), so any OpenAI client gets well-formed tool
calls from a model that has no native tool support; ``tool_choice`` is honoured the same
way. The wire format is in :mod:`tether.providers.local_wire`: a request the server cannot
honour exactly is refused with HTTP 400 before any work starts, and a streamed reply starts
only once the model has started answering, so an early failure is an HTTP error too.

Written on Starlette and uvicorn rather than llama.cpp's own server: for a model whose chat
template has no tool support (SmolLM2) that server ignores ``tools`` and ``tool_choice``.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.responses import Response

from tether.clients import ChatClient
from tether.errors import ConfigError, ContextWindowExceeded, ProviderError, TetherError
from tether.providers.local_wire import (
    MAX_TOKENS_CEILING,
    BadRequest,
    completion_body,
    parse_request,
    stream_events,
)

__all__ = [
    "DEFAULT_PORT",
    "BadRequest",
    "bind",
    "create_app",
    "parse_request",
    "running_server",
    "serve_local",
]

DEFAULT_PORT = 8765


# --- the app --------------------------------------------------------------------------------


def _error(message: str, status: int, code: str | None = None) -> Response:
    from starlette.responses import JSONResponse

    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "code": code}}, status)


def _error_of(exc: TetherError) -> Response:
    """The HTTP error for a failure before any byte of the reply was sent."""
    if isinstance(exc, ContextWindowExceeded):
        return _error(str(exc), 400, "context_length_exceeded")
    if isinstance(exc, ProviderError):
        return _error(str(exc), exc.status or (400 if exc.kind == "bad_request" else 500))
    if isinstance(exc, ConfigError):  # a request the model cannot take (its schema, ...)
        return _error(str(exc), 400)
    return _error(str(exc), 500)


async def _prepend(head: str, rest: AsyncIterator[str]) -> AsyncIterator[str]:
    yield head
    async for event in rest:
        yield event


def create_app(
    client: ChatClient | None = None,
    model: str | None = None,
    *,
    max_tokens_ceiling: int = MAX_TOKENS_CEILING,
) -> Any:
    """The Starlette app serving ``client`` (default: the local model, constrained).
    A request may ask for at most ``max_tokens_ceiling`` reply tokens."""
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
            parsed = parse_request(body, max_tokens_ceiling)
        except (ValueError, BadRequest, AttributeError, TypeError, RecursionError) as exc:
            return _error(f"bad request: {exc}", 400)
        try:
            if body.get("stream"):
                usage = bool((body.get("stream_options") or {}).get("include_usage"))
                events = stream_events(served, parsed, name, usage)
                head = await anext(events)  # the model has started: failures so far are HTTP
                return StreamingResponse(_prepend(head, events), media_type="text/event-stream")
            response = await served.complete(*parsed)
        except TetherError as exc:
            return _error_of(exc)
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


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (``0``: a free port); :class:`ConfigError` with the
    reason when it cannot be."""
    where = f"{host}:{port}"
    try:
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} is not between 0 and 65535")
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
        except OSError:
            sock.close()
            raise
    except (OSError, ValueError, OverflowError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(f"cannot listen on {where}: {reason}; choose another --port") from exc
    return sock


def serve_local(
    host: str = "127.0.0.1", port: int = DEFAULT_PORT, *, say: Callable[[str], None] = print
) -> None:
    """Serve the local model until interrupted (blocks). Says the banner, binds, loads the
    model, and only then says the endpoint; a port that cannot be bound is a
    :class:`ConfigError` before anything else happens."""
    import uvicorn

    from tether.providers.local import LocalClient, demo_client

    client = demo_client()
    inner = client.inner
    sock = bind(host, port)
    try:
        if isinstance(inner, LocalClient):
            say(inner.banner())
            inner.load(say)
        bound = sock.getsockname()[1]
        say(f"OpenAI-compatible endpoint: http://{host}:{bound}/v1 (any api_key)")
        config = uvicorn.Config(create_app(client), log_level="warning")
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
