"""Sub-agents: a whole loop as a tool; fresh history, own caps, usage rolls up."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated

import pytest

from tether.context.subagent import SubAgentTool
from tether.errors import InvalidArguments
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message, Usage
from tether.providers.scripted import ChatResponse, ScriptedClient, call_reply, text_reply
from tether.tools import RunContext, tool

CHILD_USAGE = Usage(input_tokens=700, output_tokens=70, requests=1)
PARENT_USAGE = Usage(input_tokens=100, output_tokens=10, requests=1)


@tool(thread=False)
def read_file(name: Annotated[str, "File name."]) -> str:
    """Reads a file of the project. Used by the investigator. Changes nothing."""
    return f"contents of {name}: " + "x" * 3000


def investigator(history: Sequence[Message]) -> ChatResponse:
    """Reads three files, then concludes."""
    done = sum(len(m.tool_results) for m in history)
    if done < 3:
        return call_reply(("read_file", {"name": f"f{done}.py"}), usage=CHILD_USAGE)
    return text_reply(f"Conclusion for: {history[0].text}", usage=CHILD_USAGE)


def parent_script(history: Sequence[Message]) -> ChatResponse:
    results = [r for m in history for r in m.tool_results]
    if not results:
        return call_reply(("investigate", {"task": "Why does login fail?"}), usage=PARENT_USAGE)
    if len(results) == 1 and not results[0].is_error:
        return call_reply(("investigate", {"task": "And logout?"}), usage=PARENT_USAGE)
    return text_reply("Final: " + results[-1].content, usage=PARENT_USAGE)


async def test_subagent_returns_only_its_conclusion_and_usage_rolls_up() -> None:
    child_model = ScriptedClient(investigator)
    child = Agent(child_model, [read_file], limits=Limits(max_turns=10))
    sub = child.as_tool("investigate", "Investigates a question. Reads files. Changes nothing.")
    assert isinstance(sub, SubAgentTool)
    assert list(sub.spec.parameters["properties"]) == ["task"]
    parent_model = ScriptedClient(parent_script)
    result = await Agent(parent_model, [sub], limits=Limits(max_turns=5)).run("Help")
    assert result.outcome.completed
    # two sub-agent runs of four requests each, three parent requests
    assert result.usage.requests == 3 + 8
    assert result.usage.input_tokens == 3 * 100 + 8 * 700
    assert result.usage.output_tokens == 3 * 10 + 8 * 70
    tool_results = [r for m in result.transcript for r in m.tool_results]
    assert [r.content for r in tool_results] == [
        "Conclusion for: Why does login fail?",
        "Conclusion for: And logout?",
    ]
    # fresh history per call: the second run starts from the task alone
    starts = [r.messages for r in child_model.requests if len(r.messages) == 1]
    assert [s[0].text for s in starts] == ["Why does login fail?", "And logout?"]
    # none of the files read by the sub-agent reached the parent's context
    assert all("contents of" not in m.text for r in parent_model.requests for m in r.messages)
    assert all(
        "contents of" not in res.content
        for r in parent_model.requests
        for m in r.messages
        for res in m.tool_results
    )


async def test_a_capped_subagent_comes_back_as_an_error_result_that_says_why() -> None:
    child = Agent(ScriptedClient(investigator), [read_file], limits=Limits(max_turns=2))
    sub = SubAgentTool(child, "investigate", "Investigates. Reads files. Changes nothing.")
    parent = Agent(ScriptedClient(parent_script), [sub], limits=Limits(max_turns=5))
    result = await parent.run("Help")
    first = result.transcript[2].tool_results[0]
    assert first.is_error
    assert "did not finish: turn_cap, limit max_turns" in first.content
    assert "no final answer in 2 turns" in first.content
    # the capped child's tokens still count in the parent's usage
    assert result.usage.input_tokens >= 2 * 700


async def test_subagent_usage_is_reported_through_the_context() -> None:
    child = Agent(ScriptedClient(investigator), [read_file])
    sub = SubAgentTool(child, "investigate", "Investigates. Reads files. Changes nothing.")
    seen: list[Usage] = []
    ctx: RunContext[None] = RunContext(None, run_id="r1", usage_sink=seen.append)
    assert await sub.invoke({"task": "q"}, ctx) == "Conclusion for: q"
    assert seen == [Usage(2800, 280, 0, 0, 4)]


@pytest.mark.parametrize("arguments", [{}, {"task": ""}, {"task": 3}, {"task": "q", "x": 1}])
async def test_bad_arguments_are_refused(arguments: dict[str, object]) -> None:
    sub = SubAgentTool(Agent(ScriptedClient([])), "investigate", "Investigates. Reads. No.")
    with pytest.raises(InvalidArguments):
        await sub.invoke(arguments, RunContext(None))


async def test_cancelling_the_parent_cancels_the_subagent() -> None:
    started = asyncio.Event()

    @tool
    async def wait_forever(reason: Annotated[str, "Why."]) -> str:
        """Waits forever. Used to test cancellation. Does nothing else."""
        started.set()
        await asyncio.sleep(3600)
        return "never"

    child_model = ScriptedClient([call_reply(("wait_forever", {"reason": "x"}))])
    child = Agent(child_model, [wait_forever])
    sub = SubAgentTool(child, "investigate", "Investigates. Waits. Changes nothing.")
    parent = Agent(ScriptedClient([call_reply(("investigate", {"task": "q"}))]), [sub])
    run = parent.start("Help")
    await asyncio.wait_for(started.wait(), 5)
    run.cancel()
    result = await asyncio.wait_for(run, 5)
    assert result.outcome.kind == "cancelled"
    assert result.usage.requests == 2  # the parent's request and the child's
    assert result.transcript[-1].tool_results[0].status == "interrupted"
