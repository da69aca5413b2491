"""Triage: one structured-output call, tested with a scripted client."""

from __future__ import annotations

import json

import pytest

from tether.clients import ChatOptions
from tether.messages import Message
from tether.providers.scripted import ScriptedClient
from tether_desk.triage import classify


async def test_one_call_gives_the_category() -> None:
    client = ScriptedClient(['{"category": "tracking"}'])
    result = await classify(client, "Ou en est ma commande ?", "Bonjour")
    assert result.category == "tracking" and not result.error
    assert len(client.requests) == 1
    sent = client.requests[0]
    assert sent.tools == ()
    assert json.loads(sent.messages[0].text) == {
        "subject": "Ou en est ma commande ?",
        "text": "Bonjour",
    }


async def test_an_invalid_reply_is_asked_again_once() -> None:
    client = ScriptedClient(['{"category": "urgent"}', '{"category": "refund"}'])
    result = await classify(client, "s", "t")
    assert result.category == "refund" and len(client.requests) == 2
    assert "could not be used" in client.requests[1].messages[-1].text
    assert client.requests[0].options.output_schema is not None  # the provider is asked for it


async def test_two_invalid_replies_go_to_a_human() -> None:
    client = ScriptedClient(["refund please", "I think refund"])
    result = await classify(client, "s", "t")
    assert result.category == "other" and result.error.startswith("invalid")
    assert len(client.requests) == 2


async def test_a_model_error_goes_to_a_human() -> None:
    client = ScriptedClient([])  # no reply left: a ProviderError
    result = await classify(client, "s", "t")
    assert result.category == "other" and "model error" in result.error


async def test_the_ticket_text_is_bounded() -> None:
    client = ScriptedClient(['{"category": "other"}'])
    await classify(client, "s" * 1000, "x" * 1_000_000)
    assert len(client.requests[0].messages[0].text) < 5_000


async def test_offline_the_desk_triages_the_seeded_tickets_by_keywords() -> None:
    from tether.demo import read_order
    from tether.errors import ConfigError
    from tether_desk.models_cli import desk_triage_client
    from tether_desk.scripted import KeywordTriage
    from tether_desk.seed import TICKETS

    client = desk_triage_client("local")
    assert isinstance(client, KeywordTriage) and desk_triage_client("scripted") is None
    got = {number: (await classify(client, s, b)).category for number, s, b in TICKETS}
    assert got == {"C-1042": "refund", "C-1187": "tracking", "C-2210": "refund", "C-3107": "other"}
    with pytest.raises(ConfigError, match="no tools"):
        await client.complete([Message.user("x")], [read_order.spec], ChatOptions())
