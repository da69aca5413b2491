"""Tools of an MCP server as ordinary tether tools.

Each remote tool becomes an :class:`MCPTool`: its spec is the server's name, description
and input schema; ``invoke`` validates the arguments against that schema (``jsonschema``)
*before* anything is sent, then calls the server. The usual rules hold: a result the
server marks ``isError`` raises :class:`~tether.errors.ToolFailure` (its text is shown to
the model); a protocol or transport failure raises :class:`MCPToolError` (the model sees a
generic failure unless detailed errors are on). Approval is decided here, in code, never
from the server's annotations, which are only hints.
"""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, TextIO, TypeAlias

import mcp_types
from jsonschema.protocols import Validator
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tether.errors import InvalidArguments, TetherError, ToolDefinitionError, ToolFailure
from tether.schema_tools import compile_schema, schema_problems
from tether.tools import NAME_RE, RunContext, Tool, ToolSpec, to_text

ApprovalRule: TypeAlias = bool | Collection[str] | Callable[[mcp_types.Tool], bool]
"""Which remote tools wait for a human: all (``True``), none (``False``), those named,
or those a function picks (it sees the server's listing, hints included)."""

_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


class MCPToolError(TetherError):
    """An MCP server could not be reached or failed to answer a call (not a tool error)."""


class MCPTool(Tool):
    """One tool of a connected MCP server.

    It lives as long as the connection that produced it (the ``async with`` block of
    :func:`mcp_tools`); calling it afterwards raises :class:`MCPToolError`.
    """

    def __init__(
        self,
        client: Client,
        remote: mcp_types.Tool,
        *,
        name: str | None = None,
        requires_approval: bool = False,
        timeout_seconds: float | None = None,
    ) -> None:
        self.client = client
        self.remote = remote
        self.requires_approval = requires_approval
        self._timeout = timeout_seconds
        local = name or remote.name
        if not NAME_RE.match(local):
            raise ToolDefinitionError(
                f"MCP tool name {local!r} must be 1-64 letters, digits, '_' or '-'; "
                "pass a prefix or let mcp_tools() rename it"
            )
        schema = dict(remote.input_schema)
        self._validator = _compile(local, schema)
        description = remote.description or remote.title or f"The {remote.name} tool."
        self.spec = ToolSpec(local, description, schema)

    def check_arguments(self, arguments: Mapping[str, Any]) -> None:
        """Raise :class:`~tether.errors.InvalidArguments` naming each field that breaks
        the input schema (at most ten)."""
        problems = schema_problems(self._validator, arguments)
        if problems:
            raise InvalidArguments(self.spec.name, problems)

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        """Validate, call the server, return the result's text."""
        self.check_arguments(arguments)
        try:
            result = await self.client.call_tool(
                self.remote.name, dict(arguments), read_timeout_seconds=self._timeout
            )
        except Exception as exc:
            raise MCPToolError(
                f"the MCP call to {self.remote.name!r} failed: {_describe(exc)}"
            ) from exc
        text = result_text(result)
        if result.is_error:
            raise ToolFailure(text or f"Tool {self.spec.name!r} reported an error.")
        return text


def result_text(result: mcp_types.CallToolResult) -> str:
    """The text of an MCP tool result: text blocks joined by newlines, non-text blocks
    named (not inlined), structured content as JSON when there is no text."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        elif isinstance(block, mcp_types.EmbeddedResource):
            res = block.resource
            if isinstance(res, mcp_types.TextResourceContents):
                parts.append(res.text)
            else:
                parts.append(f"[binary resource {res.uri} ({res.mime_type or 'unknown type'})]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link {block.uri}: {block.name}]")
        else:
            parts.append(f"[{block.type} content ({block.mime_type}) not shown]")
    if not parts and result.structured_content is not None:
        return to_text(result.structured_content)
    return "\n".join(parts)


# --- loading --------------------------------------------------------------------------


ServerTarget: TypeAlias = str | StdioServerParameters | Any
"""What :class:`mcp.Client` accepts: a URL, stdio parameters, a transport, a server."""


@asynccontextmanager
async def mcp_tools(
    server: ServerTarget,
    *,
    prefix: str = "",
    include: Collection[str] | None = None,
    requires_approval: ApprovalRule = False,
    timeout_seconds: float | None = None,
) -> AsyncIterator[list[MCPTool]]:
    """Connect to an MCP server, list its tools, yield them as tether tools; the
    connection closes when the block ends.

    ``prefix`` is put before each name (names that still break tether's name rule have
    their other characters replaced by ``_``); ``include`` keeps only the remote names
    given; ``timeout_seconds`` bounds each call on the wire.
    """
    label = _label(server)
    try:
        async with AsyncExitStack() as stack:
            try:
                client = await stack.enter_async_context(Client(server))
                listed = await _list_all(client)
            except Exception as exc:
                raise MCPToolError(
                    f"cannot load tools from the MCP server {label}: {_describe(exc)}"
                ) from exc
            yield _build(listed, client, prefix, include, requires_approval, timeout_seconds)
    except BaseExceptionGroup as group:
        # The SDK's task groups wrap whatever crosses them, the caller's own errors too.
        leaf = _single(group)
        if leaf is None:
            raise
        raise leaf from leaf.__cause__


def mcp_tools_stdio(
    command: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    errlog: TextIO | None = None,
    prefix: str = "",
    include: Collection[str] | None = None,
    requires_approval: ApprovalRule = False,
    timeout_seconds: float | None = None,
) -> AbstractAsyncContextManager[list[MCPTool]]:
    """Start ``command args`` as a subprocess speaking MCP over stdio and load its tools::

        async with mcp_tools_stdio("python", ["server.py"]) as tools:
            result = await Agent(client, tools).run("...")

    The process ends with the block. ``env`` is added to a minimal default environment
    (the server does not inherit secrets from this process); ``errlog`` receives its
    standard error (default: this process's).
    """
    params = StdioServerParameters(
        command=command, args=list(args), env=dict(env) if env else None, cwd=cwd
    )
    transport = stdio_client(params, errlog=errlog if errlog is not None else sys.stderr)
    return mcp_tools(
        _Labelled(transport, f"{command} {' '.join(args)}".strip()),
        prefix=prefix,
        include=include,
        requires_approval=requires_approval,
        timeout_seconds=timeout_seconds,
    )


def mcp_tools_http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    prefix: str = "",
    include: Collection[str] | None = None,
    requires_approval: ApprovalRule = False,
    timeout_seconds: float | None = None,
) -> AbstractAsyncContextManager[list[MCPTool]]:
    """Connect to an MCP server over streamable HTTP at ``url`` and load its tools.

    ``headers`` go with every request (an ``Authorization`` header, for instance).
    """
    target: ServerTarget = url
    if headers:
        http = create_mcp_http_client(headers=dict(headers))
        target = _Labelled(streamable_http_client(url, http_client=http), url, http)
    return mcp_tools(
        target,
        prefix=prefix,
        include=include,
        requires_approval=requires_approval,
        timeout_seconds=timeout_seconds,
    )


# --- helpers --------------------------------------------------------------------------


class _Labelled:
    """A transport with a readable label for error messages (and an HTTP client to close)."""

    def __init__(self, transport: Any, label: str, owned: Any = None) -> None:
        self.transport = transport
        self.label = label
        self._owned = owned

    async def __aenter__(self) -> Any:
        if self._owned is not None:
            await self._owned.__aenter__()
        return await self.transport.__aenter__()

    async def __aexit__(self, *exc: Any) -> bool | None:
        try:
            return bool(await self.transport.__aexit__(*exc))
        finally:
            if self._owned is not None:
                await self._owned.__aexit__(None, None, None)


def _label(server: Any) -> str:
    if isinstance(server, _Labelled):
        return server.label
    if isinstance(server, str):
        return server
    if isinstance(server, StdioServerParameters):
        return f"{server.command} {' '.join(server.args)}".strip()
    return type(server).__name__


async def _list_all(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(1000):  # a server whose pages never end cannot hang the load
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _build(
    listed: Sequence[mcp_types.Tool],
    client: Client,
    prefix: str,
    include: Collection[str] | None,
    rule: ApprovalRule,
    timeout: float | None,
) -> list[MCPTool]:
    tools: list[MCPTool] = []
    seen: dict[str, str] = {}
    for remote in listed:
        if include is not None and remote.name not in include:
            continue
        local = _INVALID_NAME_CHARS.sub("_", prefix + remote.name)[:64]
        if local in seen:
            raise ToolDefinitionError(
                f"MCP tools {seen[local]!r} and {remote.name!r} both become {local!r}; "
                "load them with include= or a different prefix"
            )
        seen[local] = remote.name
        tools.append(
            MCPTool(
                client,
                remote,
                name=local,
                requires_approval=_needs_approval(rule, remote),
                timeout_seconds=timeout,
            )
        )
    if include is not None:
        missing = set(include) - set(seen.values())
        if missing:
            raise ToolDefinitionError(
                f"the MCP server has no tool named {', '.join(sorted(missing))}"
            )
    return tools


def _needs_approval(rule: ApprovalRule, remote: mcp_types.Tool) -> bool:
    if isinstance(rule, bool):
        return rule
    if callable(rule):
        return bool(rule(remote))
    return remote.name in rule


def _compile(name: str, schema: dict[str, Any]) -> Validator:
    return compile_schema(name, schema, "MCP tool")


def _single(group: BaseExceptionGroup[Any]) -> BaseException | None:
    """The one exception inside nested single-member groups, if that is what it is."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return None if isinstance(exc, BaseExceptionGroup) else exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        exc = _single(exc) or exc
    return f"{type(exc).__name__}: {exc}"
