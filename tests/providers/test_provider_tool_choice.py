"""``ChatOptions.tool_choice``: the exact bodies each adapter sends through its real SDK."""

from __future__ import annotations

from typing import Any

import pytest
from provider_server import FakeProvider, Reply
from provider_tools import convert, read_order
from provider_wire import a_call, a_message, a_text, c_call, c_completion, c_sse, r_response

from tether.clients import ChatClient, ChatOptions, tool_choice_of
from tether.errors import ConfigError, ProviderError
from tether.messages import Message
from tether.providers.anthropic import AnthropicClient
from tether.providers.openai_chat import OpenAIChatClient
from tether.providers.openai_responses import OpenAIResponsesClient

TOOLS = [read_order.spec, convert.spec]
CASES = ["auto", "required", "none", "convert"]

EXPECTED: dict[str, dict[str, Any]] = {
    "anthropic": {
        "auto": {"type": "auto"},
        "required": {"type": "any"},
        "none": {"type": "none"},
        "convert": {"type": "tool", "name": "convert"},
    },
    "openai": {
        "auto": "auto",
        "required": "required",
        "none": "none",
        "convert": {"type": "function", "name": "convert"},
    },
    "openai-chat": {
        "auto": "auto",
        "required": "required",
        "none": "none",
        "convert": {"type": "function", "function": {"name": "convert"}},
    },
}


def adapter(provider: str, server: FakeProvider) -> tuple[ChatClient, Reply]:
    """The adapter pointed at the wire-fixture server, and a reply it accepts."""
    if provider == "anthropic":
        reply = a_message(a_call("toolu_1", "convert", amount=2), stop="tool_use")
        client: Any = AnthropicClient("m", api_key="k", base_url=server.url, max_retries=0)
        return client, Reply(reply)
    if provider == "openai":
        reply = r_response(
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "convert",
                "arguments": '{"amount": 2}',
                "id": "fc_1",
                "status": "completed",
            }
        )
        client = OpenAIResponsesClient("m", api_key="k", base_url=f"{server.url}/v1", max_retries=0)
        return client, Reply(reply)
    reply = c_completion(None, c_call("c1", "convert", {"amount": 2}), finish="tool_calls")
    client = OpenAIChatClient("m", base_url=f"{server.url}/v1", max_retries=0)
    return client, Reply(reply)


@pytest.mark.parametrize("choice", CASES)
@pytest.mark.parametrize("provider", sorted(EXPECTED))
async def test_each_adapter_sends_the_choice_in_its_wire_form(
    server: FakeProvider, provider: str, choice: str
) -> None:
    client, reply = adapter(provider, server)
    if choice == "none":  # a reply that honours it
        reply = {
            "anthropic": Reply(a_message(a_text("No tool."))),
            "openai": Reply(
                r_response(
                    {
                        "type": "message",
                        "id": "m",
                        "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": "No tool.", "annotations": []}],
                    }
                )
            ),
            "openai-chat": Reply(c_completion("No tool.")),
        }[provider]
    server.script = [reply]
    await client.complete([Message.user("q")], TOOLS, ChatOptions(tool_choice=choice))
    (sent,) = server.bodies()
    assert sent["tool_choice"] == EXPECTED[provider][choice]
    assert [t.get("name") or t.get("function", {}).get("name") for t in sent["tools"]] == [
        "lire_commande",
        "convert",
    ]


@pytest.mark.parametrize("provider", sorted(EXPECTED))
async def test_no_choice_sends_no_field_and_a_choice_without_tools_needs_none(
    server: FakeProvider, provider: str
) -> None:
    client, reply = adapter(provider, server)
    server.script = [reply, reply]
    await client.complete([Message.user("q")], TOOLS, ChatOptions())
    await client.complete([Message.user("q")], [], ChatOptions(tool_choice="none"))
    first, second = server.bodies()
    assert "tool_choice" not in first and "tool_choice" not in second
    assert "tools" not in second


@pytest.mark.parametrize("provider", sorted(EXPECTED))
@pytest.mark.parametrize(
    ("choice", "tools", "message"),
    [
        ("delete_everything", TOOLS, "not a tool of the request"),
        ("required", [], "needs at least one tool"),
        ("convert", [], "needs at least one tool"),
        ("", TOOLS, "tool_choice must be"),
    ],
)
async def test_a_choice_no_request_could_honour_is_refused_before_sending(
    server: FakeProvider, provider: str, choice: str, tools: list[Any], message: str
) -> None:
    client, _ = adapter(provider, server)
    with pytest.raises(ConfigError, match=message):
        await client.complete([Message.user("q")], tools, ChatOptions(tool_choice=choice))
    assert server.requests == []


def test_tool_choice_of_passes_modes_and_known_names() -> None:
    assert tool_choice_of(ChatOptions(), TOOLS) is None
    assert tool_choice_of(ChatOptions(tool_choice="auto"), TOOLS) == "auto"
    assert tool_choice_of(ChatOptions(tool_choice="auto"), []) is None
    assert tool_choice_of(ChatOptions(tool_choice="lire_commande"), TOOLS) == "lire_commande"


# --- a server that ignores tool_choice: the chat adapter says so ------------------------------


def chat(server: FakeProvider, **kwargs: Any) -> OpenAIChatClient:
    return OpenAIChatClient("m", base_url=f"{server.url}/v1", max_retries=0, **kwargs)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("choice", "reply", "said"),
    [
        ("required", c_completion("I will not call."), "answered without a tool call"),
        ("convert", c_completion("Nope."), "answered without a tool call"),
        (
            "convert",
            c_completion(
                None, c_call("c1", "lire_commande", {"numero": "C-1"}), finish="tool_calls"
            ),
            "called lire_commande",
        ),
        (
            "none",
            c_completion(None, c_call("c1", "convert", {"amount": 1}), finish="tool_calls"),
            "called convert",
        ),
    ],
)
async def test_a_reply_that_breaks_the_choice_is_a_clear_error(
    server: FakeProvider, choice: str, reply: dict[str, Any], said: str, stream: bool
) -> None:
    server.script = [c_sse(reply) if stream else Reply(reply)]
    client = chat(server)
    options = ChatOptions(tool_choice=choice)

    async def send() -> None:
        if stream:
            async for _ in client.stream([Message.user("q")], TOOLS, options):
                pass
        else:
            await client.complete([Message.user("q")], TOOLS, options)

    with pytest.raises(ProviderError, match=said) as caught:
        await send()
    assert f"tool_choice was {choice!r}" in str(caught.value)
    assert "ConstrainedToolCalling" in str(caught.value)


async def test_a_truncated_reply_is_left_to_the_loop(server: FakeProvider) -> None:
    server.script = [Reply(c_completion("cut", finish="length"))]
    reply = await chat(server).complete(
        [Message.user("q")], TOOLS, ChatOptions(tool_choice="required")
    )
    assert reply.stop_reason.truncated and not reply.message.tool_calls
