"""A serial key is a named resource shared by every tool that declares it: calls on one
resource never overlap and run in the model's order, approval rounds included.
``tool_from_schema`` closes open schemas and names unknown arguments."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tether import Agent, RunContext, ScriptedClient, tool
from tether.providers.scripted import call_reply, text_reply
from tether.schema_tools import tool_from_schema

log: list[str] = []


async def work(label: str) -> str:
    log.append(f"start {label}")
    await asyncio.sleep(0.05)
    log.append(f"end {label}")
    return label


@tool(serial="order_id")
async def refund(order_id: str, amount: float) -> str:
    """Refund part of an order. Use it for refunds. It cannot be undone.

    Args:
        order_id: The order, like W1.
        amount: The amount in EUR.
    """
    return await work(f"refund {order_id} {amount:g}")


@tool(serial="order_id")
async def cancel(order_id: str) -> str:
    """Cancel an order. Use it when asked. It cannot be undone.

    Args:
        order_id: The order, like W1.
    """
    return await work(f"cancel {order_id}")


def overlapped(entries: list[str]) -> bool:
    running = 0
    for entry in entries:
        running += 1 if entry.startswith("start") else -1
        if running > 1:
            return True
    return False


async def run(client: ScriptedClient, tools: list[Any]) -> Any:
    log.clear()
    return await Agent(client, tools).run("Go.")


async def test_two_tools_on_the_same_order_never_overlap() -> None:
    client = ScriptedClient(
        [
            call_reply(("refund", {"order_id": "W1", "amount": 5}), ("cancel", {"order_id": "W1"})),
            text_reply("Done."),
        ]
    )
    await run(client, [refund, cancel])
    assert not overlapped(log)
    assert log == ["start refund W1 5", "end refund W1 5", "start cancel W1", "end cancel W1"]


async def test_other_orders_still_run_beside_each_other() -> None:
    client = ScriptedClient(
        [
            call_reply(("refund", {"order_id": "W1", "amount": 5}), ("cancel", {"order_id": "W2"})),
            text_reply("Done."),
        ]
    )
    await run(client, [refund, cancel])
    assert overlapped(log)


async def test_a_serial_object_shares_a_key_across_argument_names() -> None:
    from tether.serial_keys import Serial

    @tool(serial=Serial(key="order", arg="id"))
    async def ship(id: str) -> str:
        """Ship an order. Use it once paid. It cannot be undone.

        Args:
            id: The order, like W1.
        """
        return await work(f"ship {id}")

    @tool(serial=Serial(key="order", arg="order"))
    async def hold(order: str) -> str:
        """Hold an order. Use it on a dispute. It changes nothing else.

        Args:
            order: The order, like W1.
        """
        return await work(f"hold {order}")

    client = ScriptedClient(
        [call_reply(("ship", {"id": "W1"}), ("hold", {"order": "W1"})), text_reply("Done.")]
    )
    await run(client, [ship, hold])
    assert log == ["start ship W1", "end ship W1", "start hold W1", "end hold W1"]


@tool(serial="order_id")
async def pay_back(order_id: str, amount: float, ctx: RunContext[None]) -> str:
    """Refund part of an order. Use it for refunds. It cannot be undone.

    Args:
        order_id: The order, like W1.
        amount: The amount in EUR.
    """
    return await work(f"pay_back {order_id} {amount:g}")


# refunds over 100 EUR wait for a human
pay_back.needs_approval = lambda arguments, ctx: arguments["amount"] > 100  # type: ignore[method-assign]


async def test_order_holds_across_an_approval_round() -> None:
    client = ScriptedClient(
        [
            call_reply(
                ("pay_back", {"order_id": "W1", "amount": 500}),
                ("pay_back", {"order_id": "W1", "amount": 50}),
                ("pay_back", {"order_id": "W2", "amount": 20}),
            ),
            text_reply("Done."),
        ]
    )
    agent = Agent(client, [pay_back])
    log.clear()
    first = await agent.run("Refund.")
    assert first.outcome.kind == "awaiting_approval"
    assert log == ["start pay_back W2 20", "end pay_back W2 20"]  # W1's 50 waits for the 500
    big = next(p for p in first.pending if p.arguments["amount"] == 500)
    second = await agent.resume(first.state, [big.approve()])
    assert second.outcome.kind == "completed"
    assert log[2:] == [
        "start pay_back W1 500",
        "end pay_back W1 500",
        "start pay_back W1 50",
        "end pay_back W1 50",
    ]


ORDER_SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["order"],
}


async def test_tool_from_schema_names_an_unknown_argument() -> None:
    seen: list[dict[str, Any]] = []
    lookup = tool_from_schema(
        "lookup",
        "Look an order up. Use it first. It changes nothing.",
        ORDER_SCHEMA,
        lambda arguments, ctx: seen.append(arguments) or "ok",
    )
    assert lookup.spec.parameters["additionalProperties"] is False
    client = ScriptedClient(
        [call_reply(("lookup", {"order": "W1", "customer": "x"})), text_reply("Done.")]
    )
    result = await Agent(client, [lookup]).run("Look W1 up.")
    text = result.transcript[2].tool_results[0].content
    assert not seen
    assert "unknown argument(s) 'customer'" in text and "order, amount" in text


def test_an_explicitly_open_schema_stays_open() -> None:
    schema = {**ORDER_SCHEMA, "additionalProperties": True}
    lookup = tool_from_schema("lookup", "Look up. Use it. Nothing else.", schema, print)
    assert lookup.spec.parameters["additionalProperties"] is True


def test_a_serial_argument_must_exist() -> None:
    from tether.errors import ToolDefinitionError
    from tether.serial_keys import Serial

    with pytest.raises(ToolDefinitionError, match="unknown argument 'nope'"):
        tool_from_schema("t", "T. U. V.", ORDER_SCHEMA, print, serial=Serial("order", "nope"))
