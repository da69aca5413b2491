"""MCP: a real server over stdio (subprocess) and streamable HTTP (127.0.0.1), called
through an Agent; validation before the wire, isError results, approval, serve_tools."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import mcp_types
import pytest
import uvicorn
from mcp.server import Server

from mcp_server_fixture import SEEN
from mcp_server_fixture import tools as fixture_tools
from tether.errors import ToolDefinitionError
from tether.limits import Limits
from tether.loop import Agent
from tether.mcp import (
    MCPTool,
    MCPToolError,
    http_app,
    mcp_tools,
    mcp_tools_http,
    mcp_tools_stdio,
    serve_tools,
)
from tether.messages import Message, ToolResult
from tether.outcomes import PendingApproval
from tether.providers.scripted import ScriptedClient, call_reply, text_reply
from tether.tools import DelegatingTool, RunContext, Tool, tool

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = str(ROOT / "tests" / "mcp_server_fixture.py")
ENV = {"PYTHONPATH": str(ROOT / "src")}
HEADERS_SEEN: list[str] = []


def stdio_tools(**kwargs: Any) -> Any:
    return mcp_tools_stdio(sys.executable, [FIXTURE], env=ENV, **kwargs)


def results(message: Message) -> list[ToolResult]:
    return [p for p in message.parts if isinstance(p, ToolResult)]


# --- stdio: a real subprocess -----------------------------------------------------------


async def test_stdio_tools_through_an_agent() -> None:
    async with stdio_tools() as tools:
        assert [t.name for t in tools] == ["order_total", "add", "crash", "calls_seen"]
        total = tools[0]
        assert isinstance(total, MCPTool)
        assert total.spec.description.startswith("Return the total of one order")
        props = total.spec.parameters["properties"]
        assert props["order_id"]["pattern"] == r"^[A-Z]-\d+$"

        client = ScriptedClient(
            [
                call_reply(
                    ("add", {"a": 2, "b": 3}),
                    ("order_total", {"order_id": "bad id"}),  # breaks the pattern
                    ("add", {"a": 1}),  # misses a required field
                    ("order_total", {"order_id": "Z-9"}),  # isError from the server
                    ("crash", {}),  # the tool raises inside the server
                ),
                call_reply(("calls_seen", {})),
                text_reply("done"),
            ]
        )
        result = await Agent(client, tools).run("go")

    assert result.outcome.kind == "completed"
    ok, bad_pattern, missing, unknown, crashed = results(result.transcript[2])
    assert (ok.content, ok.is_error) == ("5", False)
    assert bad_pattern.is_error
    assert "invalid arguments for tool 'order_total'" in bad_pattern.content
    assert "order_id: 'bad id' does not match" in bad_pattern.content
    assert missing.is_error
    assert "'b' is a required property" in missing.content
    assert unknown.is_error
    assert unknown.content == "No order Z-9; check the id with the customer."
    assert crashed.is_error
    assert crashed.content == "Tool 'crash' failed."  # no detail crosses the wire
    (seen,) = results(result.transcript[4])
    # the two invalid calls never reached the server
    assert json.loads(seen.content) == {"add": 1, "order_total": 1, "crash": 1}


async def test_stdio_approval_flag_pauses_and_resume_calls_the_server() -> None:
    async with stdio_tools(
        requires_approval={"order_total"}, include={"order_total", "calls_seen"}
    ) as tools:
        by_name = {t.name: t for t in tools}
        assert set(by_name) == {"order_total", "calls_seen"}
        assert by_name["order_total"].requires_approval
        assert not by_name["calls_seen"].requires_approval
        client = ScriptedClient(
            [call_reply(("order_total", {"order_id": "B-2"})), text_reply("125.50 EUR")]
        )
        agent = Agent(client, tools)
        paused = await agent.run("Total of B-2?")
        assert paused.outcome.kind == "awaiting_approval"
        assert paused.state is not None
        (pending,) = paused.state.pending
        assert (pending.tool, dict(pending.arguments)) == ("order_total", {"order_id": "B-2"})
        ctx: RunContext[None] = RunContext(None)
        assert json.loads(await by_name["calls_seen"].invoke({}, ctx)) == {}

        done = await agent.resume(paused.state, [pending.approve()])
        assert done.outcome.kind == "completed"
        (total,) = results(done.transcript[2])
        assert (total.content, total.is_error) == ("125.50", False)
        assert json.loads(await by_name["calls_seen"].invoke({}, ctx)) == {"order_total": 1}


async def test_a_wrapper_can_require_approval_of_an_mcp_tool() -> None:
    class NeedsApproval(DelegatingTool):
        def __init__(self, inner: Tool) -> None:
            super().__init__(inner)
            self.requires_approval = True

        def approval_context(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> Any:
            return {"server": "fixture"}

    async with mcp_tools(serve_tools(fixture_tools())) as tools:
        guarded = [NeedsApproval(t) if t.name == "add" else t for t in tools]
        client = ScriptedClient([call_reply(("add", {"a": 1, "b": 1})), text_reply("2")])
        agent = Agent(client, guarded)
        paused = await agent.run("1+1")
        assert paused.outcome.kind == "awaiting_approval"
        assert paused.state is not None
        (pending,) = paused.state.pending
        assert pending.context == {"server": "fixture"}
        refused = await agent.resume(paused.state, [pending.deny("no")])
        (result,) = results(refused.transcript[2])
        assert result.is_error
        assert result.content.startswith("Refused by the user")


# --- streamable HTTP on 127.0.0.1 -------------------------------------------------------


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    app = http_app(serve_tools(fixture_tools(), name="fixture-http"))

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            HEADERS_SEEN.append(dict(scope["headers"]).get(b"x-test", b"").decode())
        await app(scope, receive, send)

    server = uvicorn.Server(
        uvicorn.Config(recording, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the MCP HTTP test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(timeout=20)
    assert not thread.is_alive()


async def test_http_tools_through_an_agent(http_url: str) -> None:
    before = dict(SEEN)
    async with mcp_tools_http(http_url, prefix="shop_") as tools:
        assert [t.name for t in tools] == [
            "shop_order_total",
            "shop_add",
            "shop_crash",
            "shop_calls_seen",
        ]
        client = ScriptedClient(
            [
                call_reply(
                    ("shop_order_total", {"order_id": "A-1"}),
                    ("shop_order_total", {"order_id": 7}),
                    ("shop_add", {"a": 20, "b": 22}),
                ),
                text_reply("ok"),
            ]
        )
        result = await Agent(client, tools).run("go")
    total, wrong_type, added = results(result.transcript[2])
    assert (total.content, total.is_error) == ("30.00", False)
    assert wrong_type.is_error
    assert "order_id: 7 is not of type 'string'" in wrong_type.content
    assert (added.content, added.is_error) == ("42", False)
    assert SEEN["order_total"] - before.get("order_total", 0) == 1
    assert SEEN["add"] - before.get("add", 0) == 1


async def test_http_headers_are_sent(http_url: str) -> None:
    HEADERS_SEEN.clear()
    async with mcp_tools_http(http_url, headers={"X-Test": "token-1"}, include={"add"}) as tools:
        (add,) = tools
        assert await add.invoke({"a": 1, "b": 2}, RunContext(None)) == "3"
    assert HEADERS_SEEN
    assert set(HEADERS_SEEN) == {"token-1"}


async def test_unreachable_server_is_one_clear_error() -> None:
    with pytest.raises(MCPToolError, match="cannot load tools from the MCP server"):
        async with mcp_tools_http("http://127.0.0.1:9/mcp"):
            pass


# --- transport failures, serve_tools rules ---------------------------------------------


async def test_call_after_close_is_a_generic_error_to_the_model() -> None:
    async with mcp_tools(serve_tools(fixture_tools())) as tools:
        pass
    client = ScriptedClient([call_reply(("add", {"a": 1, "b": 2})), text_reply("sorry")])
    result = await Agent(client, tools).run("1+2")
    (res,) = results(result.transcript[2])
    assert res.is_error
    assert res.content == "Tool 'add' failed."
    with pytest.raises(MCPToolError):
        await tools[1].invoke({"a": 1, "b": 2}, RunContext(None))


async def test_serve_tools_refuses_approval_tools_without_an_approver() -> None:
    @tool(requires_approval=True)
    def refund(order_id: str) -> str:
        """Refund an order. Use it after checking. It cannot be undone."""
        return f"refunded {order_id}"

    with pytest.raises(ToolDefinitionError, match="requires approval"):
        serve_tools([refund])

    asked: list[PendingApproval] = []

    async def deny_big(pending: PendingApproval) -> bool:
        asked.append(pending)
        return pending.arguments["order_id"] != "BIG"

    async with mcp_tools(serve_tools([refund], approve=deny_big)) as (remote,):
        assert not remote.requires_approval  # the server decides, in its own code
        ctx: RunContext[None] = RunContext(None)
        assert await remote.invoke({"order_id": "A-1"}, ctx) == "refunded A-1"
        with pytest.raises(Exception, match="Refused by the user"):
            await remote.invoke({"order_id": "BIG"}, ctx)
    assert [p.arguments["order_id"] for p in asked] == ["A-1", "BIG"]


async def test_serve_tools_applies_limits() -> None:
    @tool
    def dump() -> str:
        """Return a long text. Use it in tests. It changes nothing."""
        return "x" * 500

    async with mcp_tools(serve_tools([dump], limits=Limits(max_result_chars=100))) as (remote,):
        text = await remote.invoke({}, RunContext(None))
    assert text.startswith("x" * 100)
    assert "[400 characters omitted" in text


async def test_invalid_schema_from_a_server_is_rejected_at_load() -> None:
    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        bad = {"type": "object", "properties": {"n": {"type": "nope"}}}
        return mcp_types.ListToolsResult(
            tools=[mcp_types.Tool(name="broken", description="Broken.", input_schema=bad)]
        )

    with pytest.raises(ToolDefinitionError, match="not valid JSON Schema"):
        async with mcp_tools(Server("bad", on_list_tools=list_tools)):
            pass


async def test_structured_and_non_text_results_become_text() -> None:
    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        schema = {"type": "object", "properties": {}}
        return mcp_types.ListToolsResult(
            tools=[
                mcp_types.Tool(name=n, description=f"{n}.", input_schema=schema)
                for n in ("mixed", "structured")
            ]
        )

    async def call_tool(ctx: Any, params: Any) -> mcp_types.CallToolResult:
        if params.name == "mixed":
            return mcp_types.CallToolResult(
                content=[
                    mcp_types.TextContent(text="chart below"),
                    mcp_types.ImageContent(data="aGk=", mime_type="image/png"),
                ]
            )
        return mcp_types.CallToolResult(content=[], structured_content={"n": 1})

    server = Server("mixed", on_list_tools=list_tools, on_call_tool=call_tool)
    async with mcp_tools(server) as (mixed, structured):
        ctx: RunContext[None] = RunContext(None)
        assert await mixed.invoke({}, ctx) == "chart below\n[image content (image/png) not shown]"
        assert await structured.invoke({}, ctx) == '{"n":1}'


async def test_served_tools_get_deps_and_a_fresh_call_id() -> None:
    @tool
    def whoami(ctx: RunContext[str]) -> str:
        """Say which dependencies the server passed. Use it in tests. It changes nothing."""
        assert ctx.call is not None
        return f"{ctx.deps} {ctx.call.id}"

    async with mcp_tools(serve_tools([whoami], deps="db-1")) as (remote,):
        first = await remote.invoke({}, RunContext(None))
        second = await remote.invoke({}, RunContext(None))
    assert first.startswith("db-1 mcp_")
    assert first != second
