"""Tools and checks shared by the provider end-to-end tests."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from tether.errors import ToolFailure
from tether.tools import tool

ORDERS = {"C-1042": ("expediee", 89.9), "C-2210": ("livree", 35.0)}


@tool(name="lire_commande", thread=False)
def read_order(
    numero: Annotated[str, Field(description="Order number, like C-1234.")],
) -> dict[str, object]:
    """Read an order's shipping status and amount paid. Use it when the customer asks
    about an order. It changes nothing."""
    if numero not in ORDERS:
        raise ToolFailure(f"No order {numero}.")
    status, amount = ORDERS[numero]
    return {"numero": numero, "statut": status, "montant": amount}


@tool(thread=False)
def convert(
    amount: Annotated[float, Field(description="Amount in euros.")],
    currency: Annotated[str, Field(description="Target currency code.")] = "USD",
) -> str:
    """Convert an amount of euros. Use it when the customer asks for another currency.
    It uses a fixed rate."""
    return f"{amount * 1.1:.2f} {currency}"


def anthropic_pairing_ok(body: dict[str, Any]) -> bool:
    """Every tool_use is answered at the start of the very next user message, in order."""
    messages = body["messages"]
    for i, m in enumerate(messages):
        if m["role"] != "assistant" or not isinstance(m["content"], list):
            continue
        ids = [b["id"] for b in m["content"] if b["type"] == "tool_use"]
        if not ids:
            continue
        if i + 1 >= len(messages) or messages[i + 1]["role"] != "user":
            return False
        blocks = messages[i + 1]["content"]
        head = [b.get("tool_use_id") for b in blocks[: len(ids)]]
        if head != ids or any(b["type"] == "tool_result" for b in blocks[len(ids) :]):
            return False
    return True
