"""The Chat Completions adapter against a real third-party server: llama.cpp's own.

The server is the embedded runtime's (``xllamacpp`` runs llama.cpp's C++ HTTP server in
this process), started on 127.0.0.1 by this module from the SmolLM2 GGUF and stopped at
its end. The model is real and decoding greedy: these tests check form, not wit. What the
server cannot do is in ``docs/providers.md``; where it matters, the adapter says so.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import openai
import pytest
from provider_tools import read_order

from tether.clients import ChatOptions, ResponseDone, TextDelta
from tether.errors import ContextWindowExceeded, ProviderError
from tether.loop import Agent
from tether.messages import Message, ToolCall, ToolResult
from tether.providers.local import embedded_model_path, start_server
from tether.providers.openai_chat import OpenAIChatClient

KEY = "conformance-key"
SHORT = ChatOptions(max_output_tokens=12, temperature=0.0)  # greedy: the same reply each time


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    # one thread: greedy decoding gives the same replies on every machine
    server = start_server(embedded_model_path(), 1, 1024, api_key=KEY)
    address = server.listening_address
    assert address.startswith("http://127.0.0.1:")
    yield f"{address}/v1"
    del server
    gc.collect()


def chat(base_url: str, key: str = KEY) -> OpenAIChatClient:
    sdk = openai.AsyncOpenAI(
        base_url=base_url,
        api_key=key,
        max_retries=0,
        http_client=openai.DefaultAsyncHttpxClient(trust_env=False),  # never a proxy
    )
    return OpenAIChatClient("smollm2", sdk=sdk)


ROUND_TRIP = [
    Message.user("Where is my order C-1042?"),
    Message.assistant(ToolCall("call_1", "lire_commande", {"numero": "C-1042"})),
    Message.results([ToolResult("call_1", '{"statut": "expediee", "montant": 89.9}')]),
]


async def test_a_text_reply_with_its_usage(base_url: str) -> None:
    reply = await chat(base_url).complete([Message.user("Say hello.")], [], SHORT)
    assert reply.message.text.strip()
    assert reply.stop_reason.value in ("stop", "length")
    assert reply.usage.input_tokens + reply.usage.cache_read_tokens > 0
    assert reply.usage.output_tokens > 0


async def test_a_stream_gives_the_text_in_pieces_and_its_usage(base_url: str) -> None:
    chunks = [c async for c in chat(base_url).stream([Message.user("Count to five.")], [], SHORT)]
    deltas = [c.text for c in chunks if isinstance(c, TextDelta)]
    done = chunks[-1]
    assert isinstance(done, ResponseDone) and len(deltas) > 1
    assert done.response.message.text == "".join(deltas)
    assert done.response.usage.output_tokens >= len(deltas)  # a piece holds one token or more


@pytest.mark.parametrize("stream", [False, True])
async def test_a_history_with_calls_and_results_is_accepted(base_url: str, stream: bool) -> None:
    """The round trip of every multi-turn run: calls, then their results, sent back."""
    client = chat(base_url)
    body = client.request_body(ROUND_TRIP, [read_order.spec], SHORT)
    assert body["messages"][1]["content"] == ""  # never null
    if stream:
        chunks = [c async for c in client.stream(ROUND_TRIP, [read_order.spec], SHORT)]
        done = chunks[-1]
        assert isinstance(done, ResponseDone)
        reply = done.response
    else:
        reply = await client.complete(ROUND_TRIP, [read_order.spec], SHORT)
    assert reply.message.text or reply.message.tool_calls


async def test_the_same_history_without_tools_is_answered_in_text(base_url: str) -> None:
    options = ChatOptions(max_output_tokens=12, tool_choice="none")
    reply = await chat(base_url).complete(ROUND_TRIP, [], options)
    assert reply.message.text.strip() and not reply.message.tool_calls


async def test_a_required_call_this_model_cannot_make_is_a_clear_error(base_url: str) -> None:
    """SmolLM2's chat template has no tool support: llama.cpp then ignores the tools and
    tool_choice, and answers in text; the adapter does not pass that off as an answer."""
    options = ChatOptions(max_output_tokens=64, temperature=0.0, tool_choice="required")
    question = [Message.user("Say only: OK.")]
    with pytest.raises(ProviderError, match="answered without a tool call") as caught:
        await chat(base_url).complete(question, [read_order.spec], options)
    assert "ConstrainedToolCalling" in str(caught.value)


async def test_a_prompt_over_the_window_is_context_exceeded(base_url: str) -> None:
    with pytest.raises(ContextWindowExceeded):
        await chat(base_url).complete([Message.user("word " * 1500)], [], SHORT)


async def test_a_reply_cut_at_the_ceiling_ends_the_run_as_truncated(base_url: str) -> None:
    agent = Agent(chat(base_url), [], options=ChatOptions(max_output_tokens=2, temperature=0.0))
    result = await agent.run("Tell me a long story about a lighthouse.")
    assert result.outcome.kind == "truncated"


async def test_a_wrong_key_is_an_authentication_error(base_url: str) -> None:
    with pytest.raises(ProviderError) as caught:
        await chat(base_url, key="wrong").complete([Message.user("hi")], [], SHORT)
    assert (caught.value.kind, caught.value.status) == ("authentication", 401)


async def test_more_than_one_choice_is_refused_as_a_bad_request(base_url: str) -> None:
    options = ChatOptions(max_output_tokens=4, extra={"n": 2})
    with pytest.raises(ProviderError) as caught:
        await chat(base_url).complete([Message.user("hi")], [], options)
    assert caught.value.kind == "bad_request" and "'n'" in str(caught.value)
