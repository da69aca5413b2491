"""A small MCP server for the tests: tether tools served by ``serve_tools``.

Run as ``python tests/mcp_server_fixture.py`` (stdio). ``tools()`` is also imported by the
tests to serve the same tools over HTTP. Every call that reaches the server is counted,
and the ``calls_seen`` tool reports the counts, so a test can tell whether a call left
the client at all.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field

from tether.errors import ToolFailure
from tether.mcp import run_stdio, serve_tools
from tether.tools import DelegatingTool, RunContext, Tool, tool

ORDERS = {"A-1": 30.0, "B-2": 125.5}
SEEN: Counter[str] = Counter()


class Counting(DelegatingTool):
    """Counts the calls that reach the server, valid or not."""

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        SEEN[self.name] += 1
        return await self.inner.invoke(arguments, ctx)


@tool
def order_total(
    order_id: Annotated[str, Field(pattern=r"^[A-Z]-\d+$", description="Order id, e.g. A-1.")],
) -> str:
    """Return the total of one order, in euros. Use it before a refund. It changes nothing."""
    if order_id not in ORDERS:
        raise ToolFailure(f"No order {order_id}; check the id with the customer.")
    return f"{ORDERS[order_id]:.2f}"


@tool
def add(a: Annotated[int, "First term."], b: Annotated[int, "Second term."]) -> int:
    """Add two integers. Use it for sums. It does nothing else."""
    return a + b


@tool
def crash() -> str:
    """Always fails with an internal error. Use it in tests only. It returns nothing."""
    raise RuntimeError("secret path /srv/db.sqlite is locked")


@tool
def calls_seen() -> dict[str, int]:
    """Count the calls this server received, per tool. Use it in tests. It changes nothing."""
    return dict(SEEN)


def tools() -> list[Tool]:
    """The tools this server offers."""
    return [Counting(order_total), Counting(add), Counting(crash), calls_seen]


if __name__ == "__main__":
    asyncio.run(run_stdio(serve_tools(tools(), name="fixture")))
