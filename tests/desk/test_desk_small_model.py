"""OfferUnanswered without a model: which tools each request offers, and the reply asked
as JSON and handed back as text once every tool has answered."""

from __future__ import annotations

import json

from tether.clients import ChatOptions
from tether.constrained import JSON_SCHEMA
from tether.messages import Message, ToolCall, ToolResult
from tether.providers.scripted import ScriptedClient, text_reply
from tether_desk.agent import REFUND_TOOLS
from tether_desk.small_model import REPLY_SCHEMA, OfferUnanswered, unanswered

SPECS = [t.spec for t in REFUND_TOOLS]


def history(*results: tuple[str, str]) -> list[Message]:
    """A history where each (tool, status) pair was called and answered so."""
    out = [Message.user("Handle the ticket.")]
    for i, (name, status) in enumerate(results):
        out.append(Message.assistant(ToolCall(f"c{i}", name, {})))
        out.append(Message.results([ToolResult(f"c{i}", "x", status=status)]))  # type: ignore[arg-type]
    return out


def offered(*results: tuple[str, str]) -> list[str]:
    return [t.name for t in unanswered(history(*results), SPECS)]


def test_a_tool_is_offered_until_it_answered_or_a_person_refused_it() -> None:
    assert offered() == ["read_ticket", "read_order", "propose_refund"]
    assert offered(("read_ticket", "ok")) == ["read_order", "propose_refund"]
    assert offered(("read_ticket", "ok"), ("read_order", "error")) == [
        "read_order",
        "propose_refund",
    ]
    # refused in code (an amount above what remains): offered again, to correct it
    assert "propose_refund" in offered(("propose_refund", "blocked"))
    assert "propose_refund" not in offered(("propose_refund", "denied"))  # a person said no
    assert "propose_refund" not in offered(("propose_refund", "ok"))


async def test_requests_carry_only_the_unanswered_tools() -> None:
    inner = ScriptedClient([text_reply("{}")])
    await OfferUnanswered(inner).complete(history(("read_ticket", "ok")), SPECS, ChatOptions())
    assert [t.name for t in inner.requests[0].tools] == ["read_order", "propose_refund"]


async def test_once_every_tool_answered_the_reply_is_asked_as_json_and_returned_as_text() -> None:
    done = history(("read_ticket", "ok"), ("read_order", "ok"), ("propose_refund", "ok"))
    reply = json.dumps({"answer": "Bonjour, c'est rembourse."})
    inner = ScriptedClient([text_reply(reply), text_reply('{"answer": "cut sho', stop="length")])
    client = OfferUnanswered(inner)
    response = await client.complete(done, SPECS, ChatOptions())
    assert inner.requests[0].tools == () and inner.requests[0].options.extra[JSON_SCHEMA] == (
        REPLY_SCHEMA
    )
    assert response.message.text == "Bonjour, c'est rembourse."
    cut = await client.complete(done, SPECS, ChatOptions())  # cut short: kept as it came
    assert cut.message.text == '{"answer": "cut sho' and cut.stop_reason.truncated


async def test_a_request_without_tools_passes_through() -> None:
    inner = ScriptedClient([text_reply('{"category": "refund"}')])
    response = await OfferUnanswered(inner).complete(
        [Message.user("ticket")], (), ChatOptions(max_output_tokens=64)
    )
    assert response.message.text == '{"category": "refund"}'
    assert JSON_SCHEMA not in inner.requests[0].options.extra
