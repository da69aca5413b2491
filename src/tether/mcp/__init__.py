"""MCP for tether: load a server's tools as tether tools, and serve tether tools over MCP.

Client side (the tools pass through the same validation, approval and error rules as any
other tool)::

    async with mcp_tools_stdio("python", ["server.py"]) as tools:
        result = await Agent(client, tools).run("...")

    async with mcp_tools_http("http://127.0.0.1:8000/mcp", requires_approval={"delete"}) as tools:
        ...

Server side::

    server = serve_tools([lookup_order, refund], name="support", approve=ask_a_human)
    await run_stdio(server)          # or: uvicorn on http_app(server)

Importing :mod:`tether` does not import this package (nor the MCP SDK).
"""

from tether.mcp.client import (
    ApprovalRule,
    MCPTool,
    MCPToolError,
    mcp_tools,
    mcp_tools_http,
    mcp_tools_stdio,
    result_text,
)
from tether.mcp.server import Approver, http_app, run_http, run_stdio, serve_tools

__all__ = [
    "ApprovalRule",
    "Approver",
    "MCPTool",
    "MCPToolError",
    "http_app",
    "mcp_tools",
    "mcp_tools_http",
    "mcp_tools_stdio",
    "result_text",
    "run_http",
    "run_stdio",
    "serve_tools",
]
