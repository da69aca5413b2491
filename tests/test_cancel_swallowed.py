"""``RunHandle.cancel()`` stops the run even when the only running tool swallows the
``CancelledError``: no further model request, outcome ``cancelled``."""

from __future__ import annotations

import asyncio

from tether import Agent, ScriptedClient, tool
from tether.providers.scripted import call_reply, text_reply

started = asyncio.Event()


@tool
async def stubborn() -> str:
    """Wait for a slow backend. Use it to test cancellation. It changes nothing."""
    started.set()
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        return "carried on regardless"  # swallows the cancellation
    return "done"


async def test_cancel_is_honoured_when_the_tool_swallows_it() -> None:
    started.clear()
    client = ScriptedClient(
        [call_reply(("stubborn", {})), call_reply(("stubborn", {})), text_reply("Done.")]
    )
    handle = Agent(client, [stubborn]).start("Go.")
    await asyncio.wait_for(started.wait(), 10)
    assert handle.cancel()
    result = await asyncio.wait_for(handle, 10)
    assert result.outcome.kind == "cancelled"
    assert len(client.requests) == 1  # no request after the cancel
    assert result.transcript[-1].tool_results[0].content == "carried on regardless"
