"""Approvals on a real workload: a denial is not a failure, tools from existing schemas,
writes in order, a whole turn decided at once."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Annotated, Any

import pytest

from tether.errors import ToolDefinitionError
from tether.guards.approval import (
    TurnApprovalRequest,
    Verdict,
    decide_turn,
    run_with_approvals,
)
from tether.limits import Limits
from tether.loop import Agent
from tether.providers.scripted import ScriptedClient, call_reply
from tether.schema_tools import tool_from_schema
from tether.tools import RunContext, tool

cancelled: list[str] = []


@tool(requires_approval=True, thread=False)
def cancel_order(order_id: Annotated[str, "Order."]) -> str:
    """Cancel an order. Irreversible."""
    cancelled.append(order_id)
    return f"cancelled {order_id}"


async def test_three_denials_in_a_row_let_the_model_answer() -> None:
    cancelled.clear()
    script = [
        call_reply(("cancel_order", {"order_id": "A"})),
        call_reply(("cancel_order", {"order_id": "B"})),
        call_reply(("cancel_order", {"order_id": "C"})),
        "None of your orders were cancelled: each cancellation was refused.",
    ]
    agent = Agent(ScriptedClient(script), [cancel_order], limits=Limits(max_consecutive_errors=3))
    result = await run_with_approvals(agent, "cancel A, B and C", lambda r: Verdict(False, "no"))
    assert result.outcome.kind == "completed"
    assert result.output.startswith("None of your orders were cancelled")
    assert cancelled == []
    assert len(result.results("denied")) == 3


async def test_errors_still_end_the_run_and_a_denial_does_not_reset_them() -> None:
    @tool(thread=False)
    def broken(x: Annotated[int, "X."]) -> str:
        """Always fails."""
        raise RuntimeError("no")

    script = [
        call_reply(("broken", {"x": 1})),
        call_reply(("cancel_order", {"order_id": "A"})),
        call_reply(("broken", {"x": 2})),
        "never",
    ]
    agent = Agent(
        ScriptedClient(script), [broken, cancel_order], limits=Limits(max_consecutive_errors=2)
    )
    result = await run_with_approvals(agent, "q", lambda r: False)
    assert (result.outcome.kind, result.outcome.error) == ("failed", "tool_errors")


ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^#W\\d{7}$", "description": "The order."},
        "items": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
    "required": ["order_id", "items"],
    "additionalProperties": False,
}


async def test_a_tool_from_an_existing_schema_is_validated_like_tool() -> None:
    seen: list[dict[str, Any]] = []

    def exchange(arguments: dict[str, Any], ctx: RunContext[Any]) -> dict[str, Any]:
        seen.append(arguments)
        return {"ok": True, "order": arguments["order_id"]}

    exchange_tool = tool_from_schema(
        "exchange_items", "Exchange items of a delivered order.", ORDER_SCHEMA, exchange
    )
    assert exchange_tool.spec.parameters == ORDER_SCHEMA
    script = [
        call_reply(("exchange_items", {"order_id": "W1", "items": [], "gift": True})),
        call_reply(("exchange_items", {"order_id": "#W0000001", "items": ["shirt"]})),
        "done",
    ]
    for _ in range(2):  # built once, reused by two agents
        seen.clear()
        result = await Agent(ScriptedClient(list(script)), [exchange_tool]).run("q")
        bad = result.transcript[2].tool_results[0]
        assert bad.status == "error"
        assert "order_id: 'W1' does not match" in bad.content
        assert "items: [] should be non-empty" in bad.content
        assert "unknown argument(s) 'gift'; this takes order_id, items" in bad.content
        good = result.transcript[4].tool_results[0]
        assert good.content == '{"ok":true,"order":"#W0000001"}'
        assert seen == [{"order_id": "#W0000001", "items": ["shirt"]}]


def test_a_bad_schema_is_refused_at_definition() -> None:
    with pytest.raises(ToolDefinitionError, match="not valid JSON Schema"):
        tool_from_schema("t", "T.", {"type": "object", "properties": {"a": {"type": 7}}}, print)
    with pytest.raises(ToolDefinitionError, match="JSON object schema"):
        tool_from_schema("t", "T.", {"type": "string"}, print)
    with pytest.raises(ToolDefinitionError, match="unknown argument"):
        tool_from_schema("t", "T.", ORDER_SCHEMA, print, serial="order")


class Overlaps:
    """Records, for sync tools in threads, whether two calls were ever inside at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside: dict[str, int] = {}
        self.order: list[str] = []
        self.overlapped: set[str] = set()

    def run(self, key: str, label: str) -> str:
        with self.lock:
            self.inside[key] = self.inside.get(key, 0) + 1
            if self.inside[key] > 1:
                self.overlapped.add(key)
            self.order.append(label)
        time.sleep(0.05)
        with self.lock:
            self.inside[key] -= 1
        return label


async def test_serial_calls_on_one_order_run_in_the_models_order() -> None:
    seen = Overlaps()

    @tool(serial="order_id")
    def update(order_id: Annotated[str, "Order."], step: Annotated[int, "Step."]) -> str:
        """Update an order (not thread-safe per order)."""
        return seen.run(order_id, f"{order_id}:{step}")

    calls = [("update", {"order_id": o, "step": s}) for s in range(3) for o in ("A", "B")]
    result = await Agent(ScriptedClient([call_reply(*calls), "ok"]), [update]).run("q")
    assert result.outcome.kind == "completed"
    assert seen.overlapped == set()
    assert [x for x in seen.order if x.startswith("A")] == ["A:0", "A:1", "A:2"]
    assert [x for x in seen.order if x.startswith("B")] == ["B:0", "B:1", "B:2"]


async def test_a_serial_tool_never_overlaps_even_across_runs() -> None:
    seen = Overlaps()

    @tool(serial=True)
    def write(n: Annotated[int, "N."]) -> str:
        """Write (not thread-safe at all)."""
        return seen.run("all", str(n))

    def agent() -> Agent[None]:
        return Agent(
            ScriptedClient([call_reply(*[("write", {"n": i}) for i in range(3)]), "ok"]), [write]
        )

    await asyncio.gather(agent().run("q"), agent().run("q"))
    assert seen.overlapped == set() and len(seen.order) == 6


async def test_unmarked_tools_still_run_concurrently() -> None:
    seen = Overlaps()

    @tool
    def read(n: Annotated[int, "N."]) -> str:
        """Read (thread-safe)."""
        return seen.run("all", str(n))

    await Agent(
        ScriptedClient([call_reply(*[("read", {"n": i}) for i in range(4)]), "ok"]), [read]
    ).run("q")
    assert seen.overlapped == {"all"}


async def test_a_whole_turn_is_decided_at_once_with_what_already_ran(
    tools: list[Any],
) -> None:
    cancelled.clear()
    script = [
        call_reply(
            ("lire_commande", {"numero": "C-1042"}),
            ("cancel_order", {"order_id": "A"}),
            ("cancel_order", {"order_id": "B"}),
        ),
        "done",
    ]
    shown: list[TurnApprovalRequest] = []

    def approver(request: TurnApprovalRequest) -> dict[str, bool]:
        shown.append(request)
        return {r.call_id: r.arguments["order_id"] == "A" for r in request.requests}

    agent = Agent(ScriptedClient(script), [*tools, cancel_order])
    result = await run_with_approvals(agent, "q", turn_approver=approver)
    assert result.outcome.kind == "completed"
    assert cancelled == ["A"]
    (request,) = shown
    assert [r.arguments for r in request.requests] == [{"order_id": "A"}, {"order_id": "B"}]
    ((name, arguments, ran),) = request.ran
    assert (name, arguments) == ("lire_commande", {"numero": "C-1042"})
    assert '"statut":"expediee"' in ran.content
    statuses = [r.status for r in result.transcript[2].tool_results]
    assert statuses == ["ok", "ok", "denied"]


async def test_a_turn_approver_fails_closed() -> None:
    script = [call_reply(("cancel_order", {"order_id": "A"}), ("cancel_order", {"order_id": "B"}))]
    first = await Agent(ScriptedClient(script), [cancel_order]).run("q")
    assert first.state is not None
    a, _ = first.state.pending

    async def slow(request: TurnApprovalRequest) -> list[bool]:
        await asyncio.sleep(5)
        return [True, True]

    def raises(request: TurnApprovalRequest) -> list[bool]:
        raise RuntimeError("approver crashed")

    cases: list[tuple[Any, float | None, list[bool]]] = [
        (lambda r: {a.call_id: True}, None, [True, False]),  # B left unanswered
        (lambda r: [True, Verdict(True)], None, [True, True]),
        (lambda r: [True], None, [False, False]),  # wrong length
        (lambda r: "yes", None, [False, False]),
        (lambda r: {a.call_id: "yes"}, None, [False, False]),
        (raises, None, [False, False]),
        (slow, 0.05, [False, False]),
    ]
    for answer, timeout, expected in cases:
        decisions = await decide_turn(first.state, answer, approval_timeout=timeout)
        assert [d.approved for d in decisions] == expected
        assert all(d.reason for d in decisions if not d.approved)
