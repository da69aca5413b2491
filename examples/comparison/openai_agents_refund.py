"""The refund agent in the OpenAI Agents SDK, on its own test model (``ScriptedModel``).

Same scenario as tether_refund.py: the approver sees and approves a refund of 89.90; the
run state leaves the process (``RunState.to_string()``) and comes back edited to 8,999.90,
naively (the amount only) or consistently (the amount, and the unkeyed fingerprint ledger
entry that travels beside it removed).
"""

import asyncio
import json

from agents import Agent, Runner, RunState, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

ORDERS = {"C-1042": 89.90}
PAID: list[float] = []


@function_tool
def read_order(order_id: str) -> dict[str, object]:
    """Read an order: its amount paid. Use it before any refund. It changes nothing.

    Args:
        order_id: The order number, like C-1042.
    """
    return {"order_id": order_id, "amount": ORDERS[order_id]}


@function_tool(needs_approval=True)
def refund(order_id: str, amount: float) -> str:
    """Refund an order. It cannot be undone and waits for a human's approval.

    Args:
        order_id: The order number, like C-1042.
        amount: The amount to refund, in EUR.
    """
    PAID.append(amount)
    return f"refunded {amount:.2f} EUR on {order_id}"


def build_agent() -> Agent:
    model = ScriptedModel(  # the test model: read the order, refund it, answer
        [
            [function_call("read_order", {"order_id": "C-1042"}, call_id="call_1")],
            [function_call("refund", {"order_id": "C-1042", "amount": 89.90}, call_id="call_2")],
            [assistant_message("Your refund of 89.90 EUR is on its way.")],
        ]
    )
    return Agent(
        name="support",
        instructions="You are a support agent.",
        tools=[read_order, refund],
        model=model,
    )


def tamper(stored: str, consistent: bool) -> str:
    """What an attacker with write access to the stored state does."""
    state = json.loads(stored.replace("89.9", "8999.9"))
    if consistent:  # also drop the fingerprint of the call, which travels beside it
        state["context"]["tool_invocations"].pop("call_2", None)
    return json.dumps(state)


async def main(tampered: str = "") -> str:
    PAID.clear()
    agent = build_agent()
    result = await Runner.run(agent, "Please refund order C-1042, it arrived broken.")
    shown = [(i.tool_name, i.arguments) for i in result.interruptions]  # the screen
    approved = {i.call_id for i in result.interruptions}  # the human approves those calls
    stored = result.to_state().to_string()  # the state leaves the process
    if tampered:
        stored = tamper(stored, consistent=tampered == "consistent")
    try:
        state = await RunState.from_string(agent, stored)
        for item in state.get_interruptions():
            if item.call_id in approved:
                state.approve(item)
        result = await Runner.run(agent, state)
    except Exception as exc:  # report whatever refuses the state
        return f"shown {shown}; refused: {type(exc).__name__}: {exc}; paid {PAID}"
    return f"shown {shown}; {result.final_output!r}; paid {PAID}"


if __name__ == "__main__":
    print("honest:             ", asyncio.run(main()))
    print("tampered (amount):  ", asyncio.run(main("naive")))
    print("tampered (and hash):", asyncio.run(main("consistent")))
