"""Whatever the model does, no adapter ever sends a history its provider would reject.

The loop runs against a scripted model with random calls and random injected faults
(truncation, malformed arguments, unknown tools, duplicate ids, refusals, errors...). Every
request it makes is converted by the three adapters, and each converted body must pair
every call with exactly one result, right after it, results first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from provider_tools import anthropic_pairing_ok, convert, read_order

from tether.clients import ChatOptions, ChatResponse, DelegatingChatClient
from tether.history import check
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message
from tether.providers.anthropic import AnthropicClient
from tether.providers.faults import FAULTS, FaultyClient
from tether.providers.openai_chat import OpenAIChatClient
from tether.providers.openai_responses import OpenAIResponsesClient
from tether.providers.scripted import ScriptedClient, call_reply, text_reply
from tether.tools import ToolSpec

ANTHROPIC = AnthropicClient("m", api_key="k")
RESPONSES = OpenAIResponsesClient("m", api_key="k")
CHAT = OpenAIChatClient("m", base_url="http://127.0.0.1:1/v1")


def responses_pairing_ok(body: dict[str, Any]) -> bool:
    """Each turn's function_call items are followed by exactly their outputs, in order."""
    items = body["input"]
    i = 0
    while i < len(items):
        calls: list[str] = []
        while i < len(items) and items[i].get("type") == "function_call":
            calls.append(items[i]["call_id"])
            i += 1
        outputs: list[str] = []
        while i < len(items) and items[i].get("type") == "function_call_output":
            outputs.append(items[i]["call_id"])
            i += 1
        if calls != outputs:
            return False
        if not calls:
            i += 1
    return True


def chat_pairing_ok(body: dict[str, Any]) -> bool:
    """Each assistant tool_calls is answered by that many tool messages right after it."""
    msgs = body["messages"]
    for i, m in enumerate(msgs):
        if m["role"] == "tool" and (i == 0 or msgs[i - 1]["role"] not in ("assistant", "tool")):
            return False
        ids = [c["id"] for c in m.get("tool_calls") or ()]
        answers = [x.get("tool_call_id") for x in msgs[i + 1 : i + 1 + len(ids)]]
        if ids and answers != ids:
            return False
    return True


class Converting(DelegatingChatClient):
    """Converts every request with the three adapters and checks the pairing."""

    checked = 0

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        assert check(messages) == []
        assert anthropic_pairing_ok(ANTHROPIC.request_body(messages, tools, options))
        assert responses_pairing_ok(RESPONSES.request_body(messages, tools, options))
        assert chat_pairing_ok(CHAT.request_body(messages, tools, options))
        Converting.checked += 1
        return await self.inner.complete(messages, tools, options)


call = st.sampled_from(
    [
        ("lire_commande", {"numero": "C-1042"}),
        ("lire_commande", {"numero": "C-0000"}),
        ("convert", {"amount": 3}),
        ("convert", {"amount": "lots"}),
        ("no_such_tool", {}),
    ]
)
turn = st.one_of(
    st.lists(call, min_size=1, max_size=3).map(
        lambda calls: call_reply(*calls, text="Let me see.")
    ),
    st.just(text_reply("All done.")),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(turn, min_size=1, max_size=5),
    faults=st.dictionaries(st.integers(1, 6), st.sampled_from(FAULTS), max_size=3),
)
def test_histories_from_the_loop_always_convert_to_valid_requests(
    turns: list[ChatResponse], faults: dict[int, Any]
) -> None:
    model = ScriptedClient([*turns, text_reply("Final.")])
    client = Converting(FaultyClient(model, faults))
    agent = Agent(client, [read_order, convert], limits=Limits(max_turns=6))
    before = Converting.checked
    result = asyncio.run(agent.run("Where are my orders?"))
    assert Converting.checked > before
    transcript = list(result.transcript)
    if transcript[-1].role == "assistant" and transcript[-1].tool_calls:
        raise AssertionError("the loop left a call unanswered")
    assert check(transcript) == []
    for body_ok, adapter in (
        (anthropic_pairing_ok, ANTHROPIC),
        (responses_pairing_ok, RESPONSES),
        (chat_pairing_ok, CHAT),
    ):
        assert body_ok(adapter.request_body(transcript, [read_order.spec], ChatOptions()))
