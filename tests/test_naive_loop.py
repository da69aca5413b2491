"""The seed's naive loop and its four defects: each test shows the naive loop failing
where tether holds.

``naive_run`` is a faithful port of the course's ``AgentNaif``: its only exit is "the stop
reason is not tool calls", it trusts the stop reason, returns truncated text, and lets a
tool's exception kill the loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from tether.clients import ChatClient, ChatOptions
from tether.errors import ProviderError
from tether.loop import Agent
from tether.messages import Message
from tether.providers.faults import FaultyClient
from tether.providers.scripted import ScriptedClient, call_reply
from tether.tools import FunctionTool

ORDER = ("lire_commande", {"numero": "C-1042"})
TOOL_STOPS = {"tool_use", "tool_calls"}


async def naive_run(client: ChatClient, tools: Sequence[FunctionTool], prompt: str) -> str:
    """The course's naive loop, as written there."""
    history: list[Message] = [Message.user(prompt)]
    specs = [t.spec for t in tools]
    response = await client.complete(history, specs, ChatOptions())
    history.append(response.message)
    while response.stop_reason.value in TOOL_STOPS:
        results = []
        for call in response.message.tool_calls:
            t = next(t for t in tools if t.name == call.name)  # unknown name: StopIteration
            results.append(await t.invoke(call.arguments, None))  # type: ignore[arg-type]
        from tether.messages import ToolResult

        history.append(
            Message.results(
                ToolResult(c.id, r)
                for c, r in zip(response.message.tool_calls, results, strict=True)
            )
        )
        response = await client.complete(history, specs, ChatOptions())
        history.append(response.message)
    return response.message.text


def looping_model(limit: int) -> ScriptedClient:
    """A model that asks for the same lookup forever (the script refuses after ``limit``)."""
    count = 0

    def reply(_: Sequence[Message]) -> object:
        nonlocal count
        count += 1
        if count > limit:
            raise ProviderError(f"still looping after {limit} requests")
        return call_reply(ORDER)

    return ScriptedClient(reply)  # type: ignore[arg-type]


async def test_defect_1_no_bound(tools: list[FunctionTool]) -> None:
    with pytest.raises(ProviderError, match="still looping after 200"):
        await naive_run(looping_model(200), tools, "q")
    client = looping_model(200)
    result = await Agent(client, tools).run("q")
    assert result.outcome.kind == "turn_cap" and len(client.requests) == 20


async def test_defect_2_missing_stop_reason_ends_the_loop_early(tools: list[FunctionTool]) -> None:
    def client() -> FaultyClient:
        inner = ScriptedClient([call_reply(ORDER, text="Je consulte."), "Expediee."])
        return FaultyClient(inner, {1: "missing_stop"})

    # naive: the pre-tool chatter is returned as if it were the answer
    assert await naive_run(client(), tools, "q") == "Je consulte."
    result = await Agent(client(), tools).run("q")
    assert result.output == "Expediee."


async def test_defect_3_truncated_reply_taken_as_answer(tools: list[FunctionTool]) -> None:
    def client() -> FaultyClient:
        return FaultyClient(ScriptedClient(["Votre commande est expediee."]), {1: "truncated_text"})

    naive = await naive_run(client(), tools, "q")
    assert naive == "Votre commande"  # half the reply, returned as the answer
    result = await Agent(client(), tools).run("q")
    assert result.outcome.kind == "truncated"


async def test_defect_4_tool_error_kills_the_loop(tools: list[FunctionTool]) -> None:
    def client() -> ScriptedClient:
        return ScriptedClient([call_reply(("explode", {"reason": "x"})), "Sorry, it failed."])

    with pytest.raises(RuntimeError, match="secret path"):
        await naive_run(client(), tools, "q")
    result = await Agent(client(), tools).run("q")
    assert result.outcome.kind == "completed"
    assert result.transcript[2].tool_results[0].is_error
