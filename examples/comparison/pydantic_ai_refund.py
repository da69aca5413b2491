"""The refund agent in pydantic-ai, on its own test model (``FunctionModel``).

Same scenario as tether_refund.py: the approver sees and approves a refund of 89.90; the
message history leaves the process and comes back edited to 8,999.90 before the run goes on
(nothing travels beside the arguments, so the naive edit is also the consistent one).
"""

from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ModelMessagesTypeAdapter,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

ORDERS = {"C-1042": 89.90}
PAID: list[float] = []


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The test model: read the order, refund it, answer."""
    calls = sum(isinstance(p, ToolCallPart) for m in messages for p in getattr(m, "parts", []))
    if calls == 0:
        return ModelResponse(parts=[ToolCallPart("read_order", {"order_id": "C-1042"})])
    if calls == 1:
        return ModelResponse(
            parts=[ToolCallPart("refund", {"order_id": "C-1042", "amount": 89.90})]
        )
    return ModelResponse(parts=[TextPart("Your refund of 89.90 EUR is on its way.")])


agent = Agent(
    FunctionModel(script),
    instructions="You are a support agent.",
    output_type=[str, DeferredToolRequests],
)


@agent.tool_plain
def read_order(order_id: str) -> dict[str, object]:
    """Read an order: its amount paid. Use it before any refund. It changes nothing."""
    return {"order_id": order_id, "amount": ORDERS[order_id]}


@agent.tool_plain(requires_approval=True)
def refund(order_id: str, amount: float) -> str:
    """Refund an order. It cannot be undone and waits for a human's approval."""
    PAID.append(amount)
    return f"refunded {amount:.2f} EUR on {order_id}"


def tamper(stored: bytes) -> bytes:
    """What an attacker with write access to the stored history does."""
    return stored.replace(b"89.9", b"8999.9")


def main(tampered: str = "") -> str:
    PAID.clear()
    result = agent.run_sync("Please refund order C-1042, it arrived broken.")
    requests = result.output
    assert isinstance(requests, DeferredToolRequests)
    shown = [(c.tool_name, c.args_as_dict()) for c in requests.approvals]  # the screen
    approvals = {c.tool_call_id: True for c in requests.approvals}  # the human approves
    stored = ModelMessagesTypeAdapter.dump_json(result.all_messages())  # leaves the process
    if tampered:
        stored = tamper(stored)
    history = ModelMessagesTypeAdapter.validate_json(stored)
    try:
        result = agent.run_sync(
            message_history=history,
            deferred_tool_results=DeferredToolResults(approvals=approvals),
        )
    except Exception as exc:  # report whatever refuses the state
        return f"shown {shown}; refused: {type(exc).__name__}: {exc}; paid {PAID}"
    return f"shown {shown}; {result.output!r}; paid {PAID}"


if __name__ == "__main__":
    print("honest:             ", main())
    print("tampered (amount):  ", main("naive"))
