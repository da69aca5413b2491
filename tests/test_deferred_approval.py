"""The core of deferred approval: pending calls end the run; decisions resume it."""

from __future__ import annotations

from typing import Annotated

import pytest

from tether.errors import StateError
from tether.history import check
from tether.loop import Agent
from tether.outcomes import Decision, RunState
from tether.providers.scripted import ScriptedClient, call_reply
from tether.tools import FunctionTool, tool

refunds: list[tuple[str, float]] = []


@tool(requires_approval=True, thread=False)
def refund(numero: Annotated[str, "Order."], amount: Annotated[float, "Amount."]) -> str:
    """Refund an order. Irreversible."""
    refunds.append((numero, amount))
    return f"refunded {amount}"


def agent(tools: list[FunctionTool]) -> Agent[None]:
    script = [
        call_reply(
            ("refund", {"numero": "C-1042", "amount": 10.0}),
            ("lire_commande", {"numero": "C-1042"}),
        ),
        "done",
    ]
    return Agent(ScriptedClient(script), [*tools, refund])


async def test_pending_then_approved(tools: list[FunctionTool]) -> None:
    refunds.clear()
    a = agent(tools)
    first = await a.run("refund me")
    assert first.outcome.kind == "awaiting_approval"
    assert refunds == []
    (pending,) = first.pending
    assert (pending.tool, pending.arguments) == ("refund", {"numero": "C-1042", "amount": 10.0})
    state = RunState.from_json(first.state.to_json())  # type: ignore[union-attr]
    assert state == first.state
    assert len(state.ready_results) == 1  # the sibling call already ran
    second = await a.resume(state, [pending.approve()])
    assert second.outcome.kind == "completed"
    assert refunds == [("C-1042", 10.0)]
    assert check(second.transcript) == []
    results = second.transcript[2].tool_results
    assert [r.call_id for r in results] == [c.id for c in second.transcript[1].tool_calls]


async def test_denied_and_bad_decisions(tools: list[FunctionTool]) -> None:
    refunds.clear()
    a = agent(tools)
    first = await a.run("refund me")
    (pending,) = first.pending
    with pytest.raises(StateError, match="other arguments"):
        await a.resume(
            first.state.to_json(),
            [Decision(pending.call_id, "0" * 64, True, run_id=pending.run_id)],
        )  # type: ignore[union-attr]
    with pytest.raises(StateError, match="no call"):
        await a.resume(first.state, [Decision("other", pending.arguments_hash, True)])  # type: ignore[arg-type]
    stale = Decision(pending.call_id, pending.arguments_hash, True, run_id="old-run")
    with pytest.raises(StateError, match="another run"):
        await a.resume(first.state, [stale])  # type: ignore[arg-type]
    second = await a.resume(first.state, [pending.deny("not this one")])  # type: ignore[arg-type]
    assert refunds == []
    res = second.transcript[2].tool_results[0]
    assert res.is_error and "Refused by the user" in res.content and "not this one" in res.content
    with pytest.raises(StateError, match="not sealed"):  # made by hand: refused unread
        await a.resume(RunState("r", second.transcript), [])
    done = RunState("r", second.transcript, agent=a.fingerprint).sealed(a.state_keys)
    with pytest.raises(StateError, match="not awaiting"):
        await a.resume(done, [])
    with pytest.raises(StateError, match="cannot read"):
        RunState.from_json('{"version": 9}')
