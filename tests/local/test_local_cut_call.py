"""A tool call cut at the token limit keeps only its own arguments' text, never the
``{"tool_calls":[...`` envelope: what ``serve-local`` sends as ``arguments`` and what the
history holds."""

from __future__ import annotations

import json

from tether.clients import ChatResponse
from tether.constrained import parse_reply
from tether.messages import Message, StopReason
from tether.providers.local_wire import completion_body

CUT = '{"tool_calls":[{"name":"lire_commande","arguments":{"numero":"C-10'


def test_a_cut_call_keeps_only_its_arguments() -> None:
    parts, _ = parse_reply(CUT, StopReason.parse("length"))
    (call,) = parts
    assert call.name == "lire_commande" and call.malformed
    assert call.raw_arguments == '{"numero":"C-10'


def test_serve_local_sends_the_cut_arguments_alone() -> None:
    parts, stop = parse_reply(CUT, StopReason.parse("length"))
    body = completion_body(ChatResponse((Message("assistant", tuple(parts)),), stop), "local")
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    arguments = choice["message"]["tool_calls"][0]["function"]["arguments"]
    assert "tool_calls" not in arguments and arguments == '{"numero":"C-10'
    json.dumps(body)  # the body is JSON-ready


def test_a_cut_before_the_arguments_gives_empty_arguments() -> None:
    parts, _ = parse_reply('{"tool_calls":[{"name":"lire_com', StopReason.parse("length"))
    (call,) = parts
    assert call.raw_arguments == "" and "tool_calls" not in call.arguments_json()
