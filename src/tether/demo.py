"""The offline demo: the support question from the course, answered by a scripted model.

It shows the loop's record: each request, each tool call and its result, and a typed
outcome. No network and no API key are needed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from tether.clients import ChatClient, ChatOptions
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message
from tether.outcomes import RunResult
from tether.providers.scripted import ScriptedClient, call_reply, text_reply
from tether.tools import FunctionTool, tool

ORDER_PATTERN = r"^C-\d{4}$"


@dataclass(frozen=True)
class Order:
    """An order as the support desk sees it."""

    numero: str
    statut: str
    montant: float


ORDERS = {"C-1042": Order("C-1042", "expediee", 89.90), "C-2210": Order("C-2210", "livree", 35.0)}


@tool(name="lire_commande", thread=False)
def read_order(
    numero: Annotated[
        str, Field(pattern=ORDER_PATTERN, description="Order number: C- then four digits.")
    ],
) -> Order:
    """Read an order's state: shipping status and amount paid. Use it when the customer
    asks where an order is. It changes nothing. It never returns the address or the
    payment method."""
    order = ORDERS.get(numero)
    if order is None:
        from tether.errors import ToolFailure

        raise ToolFailure(f"No order {numero} exists.")
    return order


def demo_script(messages: Sequence[Message]) -> str | object:
    """The scripted model: look the order up, then answer from the tool's result."""
    last = messages[-1]
    if last.role == "user":
        match = re.search(r"C-\d{4}", last.text)
        if match:
            return call_reply(
                ("lire_commande", {"numero": match.group()}),
                text=f"Je consulte l'etat de la commande {match.group()}.",
            )
        return text_reply("Quel est le numero de votre commande (forme C-1234) ?")
    result = last.tool_results[0]
    if result.is_error:
        return text_reply(f"Je n'ai pas pu lire la commande : {result.content}")
    return text_reply(f"Voici l'etat de votre commande : {result.content}")


DEMO_INSTRUCTIONS = (
    "You are a customer-support agent. Look the order up with lire_commande, then answer "
    "in one short sentence that gives the order's status (statut) and amount (montant)."
)
DEMO_LIMITS = Limits(max_turns=4, max_wall_seconds=120)
"""Tight bounds: the demo needs two turns (look the order up, answer)."""


def demo_agent(client: ChatClient | None = None) -> Agent[None]:
    """The demo agent; the scripted model unless ``client`` is given."""
    tools: list[FunctionTool] = [read_order]
    return Agent(
        client or ScriptedClient(demo_script),  # type: ignore[arg-type]
        tools,
        instructions=DEMO_INSTRUCTIONS,
        limits=DEMO_LIMITS,
        options=ChatOptions(max_output_tokens=128),
    )


async def run_demo(prompt: str, client: ChatClient | None = None) -> RunResult:
    """Run the demo agent on ``prompt``."""
    return await demo_agent(client).run(prompt)
