"""A tether toolset served as an MCP server (stdio or streamable HTTP).

Calls go through the same :class:`~tether.invoke.Invoker` as in a run, so the rules are
the same: arguments are validated by the tool, a :class:`~tether.errors.ToolFailure`
becomes an ``isError`` result with its message, any other exception an ``isError`` result
with a generic message (detail only with ``Limits(detailed_errors=True)``), results are
capped by ``max_result_chars`` and bounded by ``tool_timeout_seconds``.

A tool that requires approval is served only with an ``approve`` function: MCP cannot
pause a call for a human, so the server asks that function, in code, before running it.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import mcp_types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

from tether.errors import ToolDefinitionError
from tether.invoke import Invoker
from tether.limits import Limits
from tether.messages import ToolCall, ToolResult
from tether.outcomes import PendingApproval
from tether.tools import RunContext, Tool

if TYPE_CHECKING:
    from starlette.applications import Starlette

Approver = Callable[[PendingApproval], Awaitable[bool]]
"""Decides a call that requires approval; sees what a human approver would see."""


def serve_tools(
    tools: Iterable[Tool],
    *,
    name: str = "tether",
    version: str = "",
    instructions: str | None = None,
    deps: Any = None,
    limits: Limits | None = None,
    approve: Approver | None = None,
) -> Server[Any]:
    """An MCP server (low-level :class:`mcp.server.Server`) whose ``tools/list`` returns
    the tools' specs and whose ``tools/call`` runs them with ``deps``.

    Run it with :func:`run_stdio` or mount :func:`http_app` in an ASGI server.
    """
    by_name: dict[str, Tool] = {}
    for t in tools:
        if t.name in by_name:
            raise ToolDefinitionError(f"two tools are named {t.name!r}")
        if t.requires_approval and approve is None:
            raise ToolDefinitionError(
                f"tool {t.name!r} requires approval, which an MCP client cannot give; "
                "pass approve= or leave the tool out"
            )
        by_name[t.name] = t
    invoker = Invoker(by_name, limits or Limits())
    listing = mcp_types.ListToolsResult(
        tools=[
            mcp_types.Tool(
                name=t.spec.name,
                description=t.spec.description,
                input_schema=dict(t.spec.parameters),
            )
            for t in by_name.values()
        ]
    )
    run_id = f"mcp-{uuid.uuid4().hex[:12]}"

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return listing

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        # Request ids repeat across connections; a call id may be an idempotency key.
        call = ToolCall(f"mcp_{uuid.uuid4().hex}", params.name, dict(params.arguments or {}))

        def make_ctx(c: ToolCall) -> RunContext[Any]:
            return RunContext(deps, run_id, c, 0)

        outcome = await invoker.run_turn([call], make_ctx, 0)
        if outcome.pending:  # the call's ruling asks a human (deny-rules already ran)
            (pending,) = outcome.pending
            decision = pending.approve() if approve and await approve(pending) else pending.deny()
            outcome = await invoker.run_turn(
                [call], make_ctx, 0, {call.id: decision}, {call.id: pending}
            )
        result = outcome.results[0] or ToolResult(call.id, "Not executed.", True)
        return mcp_types.CallToolResult(
            content=[mcp_types.TextContent(text=result.content)], is_error=result.is_error
        )

    return Server(
        name,
        version=version,
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def run_stdio(server: Server[Any]) -> None:
    """Serve over this process's stdin and stdout until the client closes them."""
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def http_app(
    server: Server[Any],
    *,
    path: str = "/mcp",
    host: str = "127.0.0.1",
    stateless: bool = False,
    json_response: bool = False,
) -> Starlette:
    """An ASGI (Starlette) app serving ``server`` over streamable HTTP at ``path``.

    ``host`` is the address it will listen on: for a loopback host the SDK's DNS-rebinding
    protection is on (only loopback ``Host`` and ``Origin`` headers are accepted).
    """
    return server.streamable_http_app(
        streamable_http_path=path, host=host, stateless_http=stateless, json_response=json_response
    )


async def run_http(server: Server[Any], *, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve over streamable HTTP with uvicorn at ``http://host:port/mcp``."""
    import uvicorn

    config = uvicorn.Config(http_app(server, host=host), host=host, port=port, log_level="warning")
    await uvicorn.Server(config).serve()
