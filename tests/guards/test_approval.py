"""Approval in both modes: deferred (state, resume, bound decisions) and inline (approver,
timeout, fail closed)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import pytest

from tether.errors import StateError
from tether.guards.approval import (
    ApprovalRequest,
    InlineApproval,
    Verdict,
    console_approver,
    decide,
    refusal,
    requires_approval,
    run_with_approvals,
)
from tether.invoke import REFUSED
from tether.loop import Agent
from tether.outcomes import Decision, RunState, arguments_hash
from tether.providers.scripted import ScriptedClient, call_reply
from tether.tools import FunctionTool, RunContext, tool


class Bank:
    """A fake payment service that records what it did."""

    def __init__(self) -> None:
        self.refunds: list[tuple[str, float]] = []
        self.reads = 0

    def tools(self) -> tuple[FunctionTool, FunctionTool]:
        @tool(thread=False)
        def refund(
            order: Annotated[str, "Order number."], amount: Annotated[float, "Euros."]
        ) -> str:
            """Refund an order. Irreversible."""
            self.refunds.append((order, amount))
            return f"refunded {amount} on {order}"

        @tool(thread=False)
        def read_order(order: Annotated[str, "Order number."]) -> str:
            """Read an order. Changes nothing."""
            self.reads += 1
            return f"{order}: shipped, 89.90 paid"

        return refund, read_order


def refund_script() -> ScriptedClient:
    return ScriptedClient([call_reply(("refund", {"order": "C-1042", "amount": 89.9})), "Done."])


def context_of(arguments: Mapping[str, Any], ctx: RunContext[Any]) -> dict[str, Any]:
    return {"ticket": "Mon colis C-1042 est arrive abime.", "already_refunded": 0.0}


# --- deferred ----------------------------------------------------------------------------


async def test_deferred_pending_carries_app_context_and_runs_only_once_approved() -> None:
    bank = Bank()
    refund, _ = bank.tools()
    agent = Agent(refund_script(), [requires_approval(refund, context=context_of)])
    first = await agent.run("refund my order")
    assert first.outcome.kind == "awaiting_approval"
    assert bank.refunds == []
    (pending,) = first.pending
    assert pending.tool == "refund" and pending.context["already_refunded"] == 0.0
    assert pending.run_id == first.run_id
    done = await agent.resume(first.state.to_json(), [pending.approve()])  # type: ignore[union-attr]
    assert done.outcome.kind == "completed" and done.output == "Done."
    assert bank.refunds == [("C-1042", 89.9)]


async def test_deferred_denial_is_a_refusal_the_model_reads() -> None:
    bank = Bank()
    refund, _ = bank.tools()
    agent = Agent(refund_script(), [requires_approval(refund)])
    first = await agent.run("refund")
    done = await agent.resume(first.state, [first.pending[0].deny("not this order")])  # type: ignore[arg-type]
    result = done.transcript[2].tool_results[0]
    assert result.is_error and result.content == refusal("not this order")
    assert result.content.startswith(REFUSED)
    assert bank.refunds == []


SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from typing import Annotated
    from tether.guards.approval import requires_approval
    from tether.loop import Agent
    from tether.providers.scripted import ScriptedClient, call_reply
    from tether.tools import tool

    @tool(thread=False)  # the same tool as the resuming process's (the state is bound to it)
    def refund(order: Annotated[str, "Order number."], amount: Annotated[float, "Euros."]) -> str:
        "Refund an order. Irreversible."
        raise SystemExit("the first process must never run the refund")

    client = ScriptedClient([call_reply(("refund", {"order": "C-1042", "amount": 89.9}))])
    agent = Agent(client, [requires_approval(refund, context=lambda a, c: {"paid": 89.9})])
    result = asyncio.run(agent.run("refund my order"))
    assert result.outcome.kind == "awaiting_approval", result.outcome
    open(sys.argv[1], "w").write(result.state.to_json())
    """
)


async def test_state_written_by_another_process_resumes_here(tmp_path: Path) -> None:
    state_file = tmp_path / "state.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SCRIPT, str(state_file), stderr=subprocess.PIPE
    )
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    text = state_file.read_text()
    assert json.loads(text)["pending"][0]["context"] == {"paid": 89.9}

    bank = Bank()
    refund, _ = bank.tools()
    agent = Agent(ScriptedClient(["Refunded."]), [requires_approval(refund)])
    state = RunState.from_json(text)
    done = await agent.resume(text, [state.pending[0].approve()])
    assert done.outcome.kind == "completed" and done.run_id == state.run_id
    assert bank.refunds == [("C-1042", 89.9)]


async def test_a_decision_cannot_be_replayed_on_another_run_call_or_arguments() -> None:
    bank = Bank()
    refund, _ = bank.tools()
    agent_a = Agent(refund_script(), [requires_approval(refund)])
    agent_b = Agent(refund_script(), [requires_approval(refund)])
    run_a = await agent_a.run("refund")
    run_b = await agent_b.run("refund")
    pa, pb = run_a.pending[0], run_b.pending[0]
    # same call id and same arguments in both runs: only the run tells them apart
    assert (pa.call_id, pa.arguments_hash) == (pb.call_id, pb.arguments_hash)
    assert run_a.state is not None and run_b.state is not None
    with pytest.raises(StateError, match="another run"):
        await agent_b.resume(run_b.state, [pa.approve()])
    other = arguments_hash({"order": "C-2210", "amount": 89.9})
    other_args = Decision(pb.call_id, other, True, run_id=run_b.run_id)
    with pytest.raises(StateError, match="other arguments"):
        await agent_b.resume(run_b.state, [other_args])
    unknown = Decision("call_99", pb.arguments_hash, True, run_id=run_b.run_id)
    with pytest.raises(StateError, match="no call"):
        await agent_b.resume(run_b.state, [unknown])
    forged = Decision(pb.call_id, pb.arguments_hash, True)  # not bound to any run
    with pytest.raises(StateError, match="another run"):
        await agent_b.resume(run_b.state, [forged])
    assert bank.refunds == []
    done = await agent_b.resume(run_b.state, [pb.approve()])
    assert done.outcome.completed and bank.refunds == [("C-1042", 89.9)]


async def test_parallel_calls_run_beside_a_pending_one_and_are_kept() -> None:
    bank = Bank()
    refund, read_order = bank.tools()
    client = ScriptedClient(
        [
            call_reply(
                ("read_order", {"order": "C-1042"}),
                ("refund", {"order": "C-1042", "amount": 10.0}),
                ("read_order", {"order": "C-1042"}),
            ),
            "Done.",
        ]
    )
    agent = Agent(client, [requires_approval(refund), read_order])
    first = await agent.run("q")
    assert first.outcome.kind == "awaiting_approval" and bank.reads == 2
    assert first.state is not None and len(first.state.ready_results) == 2
    text = first.state.to_json()
    done = await agent.resume(text, [first.pending[0].approve()])
    assert bank.reads == 2  # kept, not run again
    results = done.transcript[2].tool_results
    calls = done.transcript[1].tool_calls
    assert [r.call_id for r in results] == [c.id for c in calls]
    assert [r.is_error for r in results] == [False, False, False]
    assert results[1].content == "refunded 10.0 on C-1042"


async def test_decide_and_run_with_approvals_use_the_same_approver() -> None:
    bank = Bank()
    refund, _ = bank.tools()
    seen: list[ApprovalRequest] = []

    def human(request: ApprovalRequest) -> Verdict:
        seen.append(request)
        return Verdict(request.arguments["amount"] <= 50, "too much")

    big = ScriptedClient([call_reply(("refund", {"order": "C-1042", "amount": 89.9})), "ok"])
    result = await run_with_approvals(Agent(big, [requires_approval(refund)]), "q", human)
    assert result.outcome.completed and bank.refunds == []
    assert refusal("too much") in result.transcript[2].tool_results[0].content
    small = ScriptedClient([call_reply(("refund", {"order": "C-1042", "amount": 5.0})), "ok"])
    result = await run_with_approvals(Agent(small, [requires_approval(refund)]), "q", human)
    assert bank.refunds == [("C-1042", 5.0)]
    assert seen[0].run_id and seen[0].call_id == "call_1"


async def test_deferred_approver_that_hangs_is_a_denial() -> None:
    bank = Bank()
    refund, _ = bank.tools()
    first = await Agent(refund_script(), [requires_approval(refund)]).run("q")

    async def never(request: ApprovalRequest) -> bool:
        await asyncio.sleep(60)
        return True

    (decision,) = await decide(first.pending, never, approval_timeout=0.05)
    assert not decision.approved and "no answer" in decision.reason


# --- inline ------------------------------------------------------------------------------


async def test_inline_approval_runs_the_tool_without_deferring() -> None:
    bank = Bank()
    refund, _ = bank.tools()
    requests: list[ApprovalRequest] = []

    async def approve(request: ApprovalRequest) -> bool:
        requests.append(request)
        return True

    guarded = InlineApproval(requires_approval(refund, context=context_of), approve)
    assert not guarded.requires_approval and guarded.spec == refund.spec
    result = await Agent(refund_script(), [guarded]).run("q")
    assert result.outcome.completed and bank.refunds == [("C-1042", 89.9)]
    (request,) = requests
    assert request.context["ticket"].startswith("Mon colis")
    assert request.call_id == "call_1" and request.run_id == result.run_id


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (False, ""),
        (Verdict(False, "wrong order"), "wrong order"),
        ("yes", "the approver gave no recognisable answer"),  # an unknown answer is not an approval
        (1, "the approver gave no recognisable answer"),
    ],
)
async def test_inline_anything_but_an_approval_refuses(answer: object, reason: str) -> None:
    bank = Bank()
    refund, _ = bank.tools()
    result = await Agent(refund_script(), [InlineApproval(refund, lambda r: answer)]).run("q")  # type: ignore[arg-type,return-value]
    content = result.transcript[2].tool_results[0]
    assert content.is_error and content.content == refusal(reason)
    assert bank.refunds == []


async def test_inline_timeout_is_a_refusal_and_never_runs_the_tool() -> None:
    bank = Bank()
    refund, _ = bank.tools()

    async def slow_human(request: ApprovalRequest) -> bool:
        await asyncio.sleep(30)
        return True

    started = time.perf_counter()
    result = await Agent(refund_script(), [InlineApproval(refund, slow_human, timeout=0.1)]).run(
        "q"
    )
    assert time.perf_counter() - started < 5
    content = result.transcript[2].tool_results[0].content
    assert content == refusal("no answer within 0.1 seconds")
    assert bank.refunds == []
    await asyncio.sleep(0)
    assert bank.refunds == []


async def test_inline_approver_that_raises_refuses() -> None:
    bank = Bank()
    refund, _ = bank.tools()

    def broken(request: ApprovalRequest) -> bool:
        raise ConnectionError("approval service down")

    result = await Agent(refund_script(), [InlineApproval(refund, broken)]).run("q")
    assert "could not be obtained" in result.transcript[2].tool_results[0].content
    assert bank.refunds == []


async def test_console_approver_reads_the_terminal() -> None:
    lines: list[str] = []
    yes = console_approver(read=lambda prompt: "y", write=lines.append)
    no = console_approver(read=lambda prompt: "", write=lines.append)
    request = ApprovalRequest("refund", {"amount": 5}, {"paid": 89.9})
    assert await yes(request) == Verdict(True, "")  # type: ignore[misc]
    assert await no(request) == Verdict(False, "no answer")  # type: ignore[misc]
    assert "refund" in lines[0] and "paid" in lines[1]
