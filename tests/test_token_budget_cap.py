"""Token budgets are hard caps: the last request asks for at most what is left, and an
overshoot the provider reports ends the run (or workflow) as ``budget_exceeded`` with the
figures, never ``completed``."""

from __future__ import annotations

from tether import Agent, Limits, ScriptedClient, Usage
from tether.demo import read_order
from tether.providers.scripted import call_reply, json_reply, text_reply
from tether.workflows import Workflow, run_workflow


def used(inputs: int, outputs: int) -> Usage:
    return Usage(input_tokens=inputs, output_tokens=outputs, requests=1)


async def test_an_agent_overshoot_ends_budget_exceeded_with_the_figures() -> None:
    client = ScriptedClient(
        [
            call_reply(("lire_commande", {"numero": "C-1042"}), usage=used(10, 10)),
            text_reply("Votre commande est expediee.", usage=used(30, 10)),
        ]
    )
    agent = Agent(client, [read_order], limits=Limits(max_total_tokens=30))
    result = await agent.run("Ou en est ma commande C-1042 ?")
    assert result.usage.total_tokens == 60
    assert result.outcome.kind == "budget_exceeded"
    assert result.outcome.limit == "max_total_tokens"
    assert "60 tokens used of 30" in result.outcome.reason
    assert client.requests[1].options.max_output_tokens == 10  # what was left


async def test_a_call_in_the_overshooting_reply_is_not_run() -> None:
    client = ScriptedClient(
        [call_reply(("lire_commande", {"numero": "C-1042"}), usage=used(25, 15))]
    )
    agent = Agent(client, [read_order], limits=Limits(max_total_tokens=30))
    result = await agent.run("Ou en est ma commande C-1042 ?")
    assert result.outcome.kind == "budget_exceeded"
    assert result.transcript[-1].tool_results[0].status != "ok"
    assert client.requests[0].options.max_output_tokens == 30


async def test_a_workflow_overshoot_ends_budget_exceeded() -> None:
    client = ScriptedClient(
        [json_reply("un", usage=used(20, 5)), json_reply("deux", usage=used(20, 5))]
    )

    async def body(wf: Workflow) -> str:
        first = await wf.extract("Premier ?", str)
        second = await wf.extract("Second ?", str)
        return first + second

    result = await run_workflow(client, body, limits=Limits(max_total_tokens=30))
    assert result.outcome.kind == "budget_exceeded"
    assert "50 tokens used of 30" in result.outcome.reason
    assert [s.name for s in result.steps] == ["str", "str"]
    assert client.requests[1].options.max_output_tokens == 5
