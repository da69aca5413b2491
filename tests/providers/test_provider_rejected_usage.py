"""A reply the adapter rejects (here: one that breaks ``tool_choice``) was paid for: its
usage counts in the run's usage and toward its limits."""

from __future__ import annotations

from provider_server import FakeProvider, Reply
from provider_tools import convert, read_order
from provider_wire import c_completion

from tether import Agent, ChatOptions
from tether.providers.openai_chat import OpenAIChatClient


async def test_a_rejected_reply_counts_in_usage(server: FakeProvider) -> None:
    server.script = [Reply(c_completion("I will not call a tool."))]
    client = OpenAIChatClient("m", base_url=f"{server.url}/v1", max_retries=0)
    agent = Agent(client, [read_order, convert], options=ChatOptions(tool_choice="required"))
    result = await agent.run("Convert 2 EUR.")
    assert result.outcome.kind == "failed" and "tool_choice" in result.outcome.reason
    assert result.usage.output_tokens == 9  # c_completion's completion_tokens
    assert result.usage.input_tokens + result.usage.cache_read_tokens == 30
