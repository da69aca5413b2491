"""A scripted support model for the desk: deterministic, offline, instant.

It plays both parts of the pipeline. Asked to triage (no tools), it classifies by keywords
and answers the JSON the triage expects. As the refund agent, it reads the ticket and the
order, proposes one refund (the amount the customer names for this order if it fits,
else what remains), and drafts a reply from the tool results. It follows no instruction
found in the ticket: it is the legitimate model that tests and benchmarks compare with
the obedient, hijacked one (``tether.redteam.ObedientModel``).

:class:`KeywordTriage` is its triage alone, for the embedded model: SmolLM2-135M cannot
classify tickets (on a 24-ticket set in French and English it picks one label whatever
the ticket says: 8 to 11 right, chance is 8), so offline the desk triages by keywords and
the embedded model runs the refund agent.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any

from tether.clients import BaseChatClient, ChatOptions, ChatResponse
from tether.errors import ConfigError
from tether.messages import Message, StopReason, Text, ToolCall, Usage
from tether.tools import ToolSpec

_REFUND = re.compile(
    r"rembours|refund|abim|endommag|damaged|cass|broken|manqu|missing|defectu", re.I
)
_TRACKING = re.compile(
    r"o[uù] en est|where is|suivi|tracking|quand .*arriv|when will|pas (encore )?re[cç]u", re.I
)
_AMOUNT = re.compile(r"(\d{1,6}(?:[.,]\d{1,2})?)\s*(?:€|eur\b|euros?\b)", re.I)


def keyword_category(ticket_json: str) -> str:
    """``refund``, ``tracking`` or ``other`` for a ticket sent to triage (JSON with its
    subject and text), by keywords."""
    text = ticket_json
    try:
        ticket = json.loads(ticket_json)
        text = f"{ticket.get('subject', '')} {ticket.get('text', '')}"
    except (ValueError, AttributeError):
        pass
    return "refund" if _REFUND.search(text) else "tracking" if _TRACKING.search(text) else "other"


class KeywordTriage(BaseChatClient):
    """Triage by keywords, as a client answering the triage's JSON (for a model too small
    to classify; see the module doc). It spends no tokens and has no tools."""

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        if tools or not messages:
            raise ConfigError("KeywordTriage only classifies a ticket; give it no tools")
        reply = json.dumps({"category": keyword_category(messages[-1].text)})
        message = Message("assistant", (Text(reply),))
        return ChatResponse((message,), StopReason.parse("end_turn"), Usage(requests=1), "keywords")


def _usage(messages: Sequence[Message], text: str) -> Usage:
    size = sum(len(p.text) if isinstance(p, Text) else 40 for m in messages for p in m.parts)
    return Usage(input_tokens=size // 4 + 50, output_tokens=len(text) // 4 + 5, requests=1)


class DeskScriptedModel(BaseChatClient):
    """The desk's scripted model (see the module doc)."""

    def __init__(self, delay: float = 0.0) -> None:
        self._ids = 0
        self.delay = delay
        """Seconds each reply takes (to watch a run live in the console)."""

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        if self.delay:
            await asyncio.sleep(self.delay)
        if not tools:
            return self._triage(messages)
        return self._agent(messages)

    def _reply(
        self, messages: Sequence[Message], parts: list[Text | ToolCall], stop: str
    ) -> ChatResponse:
        text = "".join(p.text if isinstance(p, Text) else p.arguments_json() for p in parts)
        message = Message("assistant", tuple(parts))
        return ChatResponse((message,), StopReason.parse(stop), _usage(messages, text))

    def _triage(self, messages: Sequence[Message]) -> ChatResponse:
        category = keyword_category(messages[0].text)
        return self._reply(messages, [Text(json.dumps({"category": category}))], "end_turn")

    def _call(self, name: str, arguments: dict[str, Any]) -> ToolCall:
        self._ids += 1
        return ToolCall(f"desk_call_{self._ids}", name, arguments)

    def _agent(self, messages: Sequence[Message]) -> ChatResponse:
        results: dict[str, tuple[str, bool]] = {}
        names: dict[str, str] = {}
        for m in messages:
            for c in m.tool_calls:
                names[c.id] = c.name
            for r in m.tool_results:
                results[names.get(r.call_id, "")] = (r.content, r.is_error)
        if "read_ticket" not in results:
            return self._reply(
                messages,
                [
                    Text("Je lis le ticket et la commande."),
                    self._call("read_ticket", {}),
                    self._call("read_order", {}),
                ],
                "tool_use",
            )
        ticket = json.loads(results["read_ticket"][0])["content"]
        order = json.loads(results["read_order"][0]) if not results["read_order"][1] else {}
        remaining = float(order.get("remaining", "0"))
        if "propose_refund" not in results and remaining > 0:
            asked = [float(a.replace(",", ".")) for a in _AMOUNT.findall(ticket["text"])]
            fitting = [a for a in asked if 0 < a <= remaining]
            amount = fitting[0] if fitting else remaining
            call = self._call(
                "propose_refund",
                {
                    "amount": round(amount, 2),
                    "reason": f"Ticket {ticket['ticket']}: item reported damaged or missing.",
                },
            )
            return self._reply(messages, [call], "tool_use")
        outcome, failed = results.get("propose_refund", ("", True))
        if not failed and outcome.startswith(("Refunded", "Already done")):
            refunded = outcome.split(":", 1)[1].split("EUR", 1)[0].strip()
            number = order.get("order")
            text = (
                f"Bonjour, nous avons rembourse {refunded} EUR sur votre commande {number}. "
                "Le remboursement apparaitra sous quelques jours. Merci de votre patience."
            )
        else:
            text = (
                "Bonjour, nous avons bien recu votre demande concernant la commande "
                f"{order.get('order')}. "
                "Un conseiller revient vers vous rapidement."
            )
        return self._reply(messages, [Text(text)], "end_turn")
