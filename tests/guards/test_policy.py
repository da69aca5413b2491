"""Policies: the tool list is the permission; argument rules refuse calls in code."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import pytest

from tether.errors import ConfigError
from tether.guards.policy import ArgumentPolicy, allowed_tools, at_most, matches, one_of
from tether.loop import Agent
from tether.providers.scripted import ScriptedClient, call_reply
from tether.tools import FunctionTool, RunContext, tool

done: list[tuple[str, Any]] = []


@tool(thread=False)
def read_order(order: Annotated[str, "Order number."]) -> str:
    """Read an order. Changes nothing."""
    done.append(("read", order))
    return f"{order}: shipped"


@tool(thread=False)
def refund(order: Annotated[str, "Order number."], amount: Annotated[float, "Euros."]) -> str:
    """Refund an order. Irreversible."""
    done.append(("refund", (order, amount)))
    return "refunded"


@tool(thread=False)
def delete_account(customer: Annotated[str, "Customer id."]) -> str:
    """Delete a customer account. Irreversible."""
    done.append(("delete", customer))
    return "deleted"


CATALOGUE = [read_order, refund, delete_account]


@pytest.fixture(autouse=True)
def _clear() -> None:
    done.clear()


def test_allowed_tools_keeps_only_the_list_in_its_order() -> None:
    chosen = allowed_tools(CATALOGUE, ["refund", "read_order", "refund"])
    assert [t.name for t in chosen] == ["refund", "read_order"]


def test_allowed_tools_rejects_an_unknown_name() -> None:
    with pytest.raises(ConfigError, match="delete_acount"):
        allowed_tools(CATALOGUE, ["read_order", "delete_acount"])


async def test_a_tool_left_out_cannot_be_called() -> None:
    client = ScriptedClient(
        [
            call_reply(("delete_account", {"customer": "K-9"}), ("read_order", {"order": "C-1"})),
            "ok",
        ]
    )
    agent = Agent(client, allowed_tools(CATALOGUE, ["read_order"]))
    result = await agent.run("q")
    bad, good = result.transcript[2].tool_results
    assert bad.is_error and bad.content.startswith("Unknown tool 'delete_account'")
    assert not good.is_error
    assert done == [("read", "C-1")]
    assert [s.name for s in client.requests[0].tools] == ["read_order"]


def own_orders(arguments: Mapping[str, Any], ctx: RunContext[Any]) -> set[str]:
    return ctx.deps["orders"]


def remaining(arguments: Mapping[str, Any], ctx: RunContext[Any]) -> float:
    return 89.9 - ctx.deps["refunded"]


def guarded_refund() -> ArgumentPolicy:
    return ArgumentPolicy(
        refund,
        matches("order", r"C-\d{4}"),
        one_of("order", own_orders),
        at_most("amount", remaining),
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"order": "C-2210", "amount": 10.0}, "order 'C-2210' is outside what this task may touch"),
        ({"order": "C-1042", "amount": 80.0}, "amount is 80, above the limit of 59.9"),
        ({"order": "C-1042", "amount": "80"}, "amount must be a number"),
        ({"order": "../C-1042", "amount": 1.0}, "order does not have the allowed form"),
    ],
)
async def test_argument_policy_refuses_before_the_tool_runs(
    arguments: dict[str, Any], message: str
) -> None:
    client = ScriptedClient([call_reply(("refund", arguments)), "ok"])
    deps = {"orders": {"C-1042"}, "refunded": 30.0}
    result = await Agent(client, [guarded_refund()], deps=deps).run("q")
    res = result.transcript[2].tool_results[0]
    assert res.status == "blocked" and res.content.startswith(f"Not allowed: {message}.")
    assert done == []


async def test_argument_policy_lets_an_allowed_call_through() -> None:
    client = ScriptedClient([call_reply(("refund", {"order": "C-1042", "amount": 59.9})), "ok"])
    deps = {"orders": {"C-1042"}, "refunded": 30.0}
    result = await Agent(client, [guarded_refund()], deps=deps).run("q")
    assert not result.transcript[2].tool_results[0].is_error
    assert done == [("refund", ("C-1042", 59.9))]


async def test_a_failing_or_async_check_is_handled_and_fails_closed() -> None:
    async def later(arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str | None:
        return None

    def broken(arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str | None:
        raise KeyError("orders")

    client = ScriptedClient([call_reply(("read_order", {"order": "C-1"})), "ok"])
    tool_ = ArgumentPolicy(read_order, later, broken)
    result = await Agent(client, [tool_]).run("q")
    res = result.transcript[2].tool_results[0]
    assert res.status == "blocked"
    assert res.content.startswith("Not allowed: the policy check failed (KeyError).")
    assert done == []


def test_a_policy_keeps_the_spec_and_the_approval_flag() -> None:
    approval_refund = FunctionTool(refund.func, requires_approval=True)
    wrapped = ArgumentPolicy(approval_refund, at_most("amount", 10))
    assert wrapped.spec == approval_refund.spec and wrapped.requires_approval
    with pytest.raises(ConfigError):
        ArgumentPolicy(refund)
