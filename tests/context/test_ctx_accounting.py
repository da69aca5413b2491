"""Token accounting: estimates before, usage after, and a simulated prefix cache."""

from __future__ import annotations

from tether.clients import ChatOptions
from tether.context.accounting import (
    PromptCacheSimulator,
    UsageLedger,
    billed_input_tokens,
    common_prefix_tokens,
)
from tether.messages import Message, Usage
from tether.providers.scripted import ScriptedClient, text_reply

OPTIONS = ChatOptions(instructions="Be brief. " * 40)


def test_billed_input_tokens_weights_cache_reads_and_writes() -> None:
    usage = Usage(
        input_tokens=1000, output_tokens=5, cache_read_tokens=9000, cache_write_tokens=400
    )
    assert billed_input_tokens(usage) == 1000 + 900 + 400
    assert billed_input_tokens(usage, cache_write=1.25) == 1000 + 900 + 500


def test_common_prefix_counts_equal_segments_then_common_characters() -> None:
    assert common_prefix_tokens(["a" * 40, "b" * 40], ["a" * 40, "b" * 40, "c" * 8]) == 20
    assert common_prefix_tokens(["a" * 40, "bbbbXXXX"], ["a" * 40, "bbbbYYYY"]) == 11
    assert common_prefix_tokens([], ["a" * 40]) == 0


async def test_simulator_bills_the_shared_prefix_as_cache_reads() -> None:
    model = ScriptedClient([text_reply("ok", usage=Usage(output_tokens=3))] * 3)
    cache = PromptCacheSimulator(model)
    first = [Message.user("question " * 100)]
    r1 = await cache.complete(first, [], OPTIONS)
    assert r1.usage.cache_read_tokens == 0 and r1.usage.input_tokens > 300
    grown = [*first, Message.assistant("answer " * 50), Message.user("more")]
    r2 = await cache.complete(grown, [], OPTIONS)
    assert r2.usage.cache_read_tokens >= r1.usage.input_tokens - 1
    assert r2.usage.output_tokens == 3 and r2.usage.requests == 1
    edited = [Message.user("QUESTION " * 100), *grown[1:]]
    r3 = await cache.complete(edited, [], OPTIONS)
    assert r3.usage.cache_read_tokens < 150  # only the instructions and a few characters


async def test_ledger_records_estimate_and_reported_usage() -> None:
    ledger = UsageLedger(ScriptedClient(["a", "b"]))
    await ledger.complete([Message.user("x" * 400)], [], ChatOptions())
    await ledger.complete([Message.user("x" * 800)], [], ChatOptions())
    assert [e.estimate for e in ledger.entries] == [104, 204]
    assert ledger.total.requests == 2 and ledger.entries[1].usage.input_tokens > 0
