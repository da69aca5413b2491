"""The refund agent in tether, on tether's scripted model (no key, no network).

An approver sees the refund of 89.90 and approves it; the run state then leaves the
process (a queue, a database, a form field). Run as is, then with the stored state edited
to refund 8,999.90, naively (the amount only) and consistently (the amount and the hash
that travels beside it): tether refuses both edited states and pays nothing, because the
state is sealed with a key the application holds (HMAC over every byte), and the human's
decision binds the hash of the arguments that were shown.
"""

import asyncio
import json

from tether import Agent, ScriptedClient, tool
from tether.errors import StateError
from tether.outcomes import arguments_hash
from tether.providers.scripted import call_reply, text_reply
from tether.state_seal import StateKeys

ORDERS = {"C-1042": 89.90}
KEYS = StateKeys.generate()  # in production: TETHER_STATE_KEYS, or `tether state-key`
PAID: list[float] = []


@tool
def read_order(order_id: str) -> dict[str, object]:
    """Read an order: its amount paid. Use it before any refund. It changes nothing.

    Args:
        order_id: The order number, like C-1042.
    """
    return {"order_id": order_id, "amount": ORDERS[order_id]}


@tool(requires_approval=True)
def refund(order_id: str, amount: float) -> str:
    """Refund an order. Use it only for a refund the customer asked for. It cannot be
    undone and waits for a human's approval.

    Args:
        order_id: The order number, like C-1042.
        amount: The amount to refund, in EUR.
    """
    PAID.append(amount)
    return f"refunded {amount:.2f} EUR on {order_id}"


def model() -> ScriptedClient:  # the test model: read the order, refund it, answer
    return ScriptedClient(
        [
            call_reply(("read_order", {"order_id": "C-1042"})),
            call_reply(("refund", {"order_id": "C-1042", "amount": 89.90})),
            text_reply("Your refund of 89.90 EUR is on its way."),
        ]
    )


def tamper(state_json: str, consistent: bool) -> str:
    """What an attacker with write access to the stored state does."""
    state = json.loads(state_json.replace("89.9", "8999.9"))
    if consistent:  # also recompute what travels beside the arguments
        for pending in state["pending"]:
            pending["arguments_hash"] = arguments_hash(pending["arguments"])
    return json.dumps(state)


async def main(tampered: str = "") -> str:
    PAID.clear()
    agent = Agent(
        model(),
        [read_order, refund],
        instructions="You are a support agent.",
        state_key=KEYS,  # the application's key: the state leaves the process sealed
    )
    result = await agent.run("Please refund order C-1042, it arrived broken.")
    shown = [(p.tool, dict(p.arguments)) for p in result.pending]  # the approval screen
    decisions = [p.approve() for p in result.pending]  # the human approves what was shown
    stored = result.state.to_json()  # the state leaves the process
    if tampered:
        stored = tamper(stored, consistent=tampered == "consistent")
    try:
        result = await agent.resume(stored, decisions)
    except StateError as exc:
        return f"shown {shown}; refused: {exc}; paid {PAID}"
    return f"shown {shown}; {result.outcome.kind}; paid {PAID}"


if __name__ == "__main__":
    print("honest:             ", asyncio.run(main()))
    print("tampered (amount):  ", asyncio.run(main("naive")))
    print("tampered (and hash):", asyncio.run(main("consistent")))
