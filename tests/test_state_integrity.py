"""A resumed run runs exactly what the human approved, once; a bad state runs nothing."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import pytest

from tether.errors import StateError
from tether.loop import Agent
from tether.messages import Message, ToolCall
from tether.outcomes import RunState
from tether.providers.scripted import ScriptedClient, call_reply
from tether.state_seal import INSECURE_UNSEALED_STATES_FOR_TESTS as UNSEALED
from tether.state_store import MemoryStateStore, SqlStateStore, StateStore
from tether.tokens import estimate_tokens
from tether.tools import FunctionTool, RunContext, tool

refunds: list[tuple[str, float]] = []


@tool(requires_approval=True, thread=False)
def refund(amount: Annotated[float, "Amount."], ctx: RunContext[None]) -> str:
    """Refund the ticket's order. Irreversible."""
    assert ctx.call is not None
    refunds.append((ctx.call.id, amount))
    return f"refunded {amount}"


def refund_agent(tools: list[FunctionTool]) -> Agent[None]:
    script = [
        call_reply(("refund", {"amount": 9.0}), ("lire_commande", {"numero": "C-1042"})),
        "done",
    ]
    return Agent(ScriptedClient(script), [*tools, refund])


async def waiting(tools: list[FunctionTool]) -> tuple[Agent[None], RunState]:
    refunds.clear()
    agent = refund_agent(tools)
    first = await agent.run("refund me")
    assert first.state is not None and first.outcome.kind == "awaiting_approval"
    return agent, first.state


def edit(state: RunState, change: Any) -> str:
    """``state`` edited by ``change``, sealed no more: the seal refuses it, and a test that
    opts out of seals sees the consistency checks refuse it too."""
    data = json.loads(state.to_json())
    change(data)
    text = json.dumps(data)
    with pytest.raises(StateError, match="seal does not match"):
        RunState.from_json(text)
    return json.dumps({**data, "format": 2, "seal": ""})


def unsealed(text: str) -> RunState:
    return RunState.from_json(text, keys=UNSEALED)


async def test_editing_only_the_pending_arguments_is_refused(tools: list[FunctionTool]) -> None:
    _, state = await waiting(tools)

    def inflate(data: dict[str, Any]) -> None:
        data["pending"][0]["arguments"]["amount"] = 900.0

    with pytest.raises(StateError, match="other arguments than the call that would run"):
        unsealed(edit(state, inflate))

    def inflate_the_call(data: dict[str, Any]) -> None:  # the approver would see 9, 900 runs
        data["transcript"][1]["parts"][0]["arguments"]["amount"] = 900.0

    with pytest.raises(StateError, match="other arguments"):
        unsealed(edit(state, inflate_the_call))
    assert refunds == []


async def test_a_corrupted_earlier_message_runs_nothing(tools: list[FunctionTool]) -> None:
    agent, state = await waiting(tools)

    def corrupt(data: dict[str, Any]) -> None:
        data["transcript"].insert(1, {"role": "tool", "parts": []})

    with pytest.raises(StateError, match="orphan result"):
        unsealed(edit(state, corrupt))
    tampered = state.to_json().replace('"text": "refund me"', '"text": "refund me 900"')
    assert tampered != state.to_json()
    with pytest.raises(StateError, match="seal does not match"):
        await agent.resume(tampered, [state.pending[0].approve()])
    # the same corruption in an object built by hand is caught too
    bad = RunState(
        state.run_id,
        (state.transcript[0], Message("tool", ()), *state.transcript[1:]),
        pending=state.pending,
        ready_results=state.ready_results,
    )
    with pytest.raises(StateError):
        await agent.resume(bad, [state.pending[0].approve()])
    assert refunds == []


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "null",
        "42",
        '"state"',
        '{"version": 1}',
        '{"format": 2, "run_id": "r", "transcript": {}}',
        '{"format": 2, "run_id": "r", "transcript": [[]]}',
        '{"format": 2, "run_id": "r", "transcript": [{"role": "user", "parts": [7]}]}',
        '{"format": 2, "run_id": "r", "transcript": [], "pending": [[]]}',
        '{"format": 2, "run_id": "r", "transcript": [], "usage": []}',
        '{"format": 2, "run_id": "r", "transcript": [], "turns": -1}',
        '{"format": 2, "run_id": "r", "transcript": [], "memo": 3}',
        '{"format": 2, "run_id": 5, "transcript": []}',
        "[" * 5000,
        "not json",
    ],
)
def test_malformed_state_documents_raise_state_error(text: str) -> None:
    with pytest.raises(StateError):
        RunState.from_json(text)


async def test_pending_must_cover_the_open_calls_exactly(tools: list[FunctionTool]) -> None:
    _, state = await waiting(tools)

    def drop_ready(data: dict[str, Any]) -> None:
        data["ready_results"] = []

    with pytest.raises(StateError, match="neither pending nor answered"):
        unsealed(edit(state, drop_ready))

    def other_tool(data: dict[str, Any]) -> None:
        data["pending"][0]["tool"] = "lire_commande"

    with pytest.raises(StateError, match="names 'lire_commande'"):
        unsealed(edit(state, other_tool))

    def foreign(data: dict[str, Any]) -> None:
        data["pending"][0]["run_id"] = "another-run"

    with pytest.raises(StateError, match="belongs to run"):
        unsealed(edit(state, foreign))


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> StateStore:
    if request.param == "memory":
        return MemoryStateStore()
    from sqlalchemy import create_engine

    return SqlStateStore(create_engine(f"sqlite:///{tmp_path / 'states.db'}"))


async def test_a_state_resumed_twice_runs_the_call_once(
    tools: list[FunctionTool], store: StateStore
) -> None:
    refunds.clear()
    agent = refund_agent(tools)
    first = await agent.run("refund me", store=store)
    assert first.state is not None and first.state.version == 1
    loaded = await store.load(first.run_id)
    assert loaded == first.state
    decision = loaded.pending[0].approve()
    results = await asyncio.gather(
        agent.resume(loaded, [decision], store=store),
        agent.resume(loaded.to_json(), [decision], store=store),
        return_exceptions=True,
    )
    errors = [r for r in results if isinstance(r, StateError)]
    assert len(errors) == 1 and "already resumed" in str(errors[0])
    assert [amount for _, amount in refunds] == [9.0]


async def test_states_of_one_run_are_numbered_and_stored_once(
    tools: list[FunctionTool], store: StateStore
) -> None:
    refunds.clear()
    script = [call_reply(("refund", {"amount": float(i)})) for i in range(1, 6)] + ["done"]
    agent = Agent(ScriptedClient(script), [*tools, refund])
    result = await agent.run("q", store=store)
    versions = []
    while result.state is not None:
        versions.append(result.state.version)
        loaded = await store.load(result.run_id)
        assert loaded == result.state
        result = await agent.resume(loaded, [loaded.pending[0].approve()], store=store)
    assert versions == [1, 2, 3, 4, 5]
    assert result.outcome.kind == "completed"
    assert [a for _, a in refunds] == [1.0, 2.0, 3.0, 4.0, 5.0]
    if isinstance(store, SqlStateStore):  # each message stored once: linear, not quadratic
        with store.engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT count(*) FROM tether_run_messages").scalar()
        assert rows == len(result.transcript) - 2


async def test_a_store_refuses_a_state_that_rewrites_the_stored_transcript(
    tools: list[FunctionTool], store: StateStore
) -> None:
    _, state = await waiting(tools)
    await store.save(state)
    forged = unsealed(
        edit(state, lambda d: d["transcript"][0]["parts"][0].update(text="something else"))
    )
    with pytest.raises(StateError, match=r"does not continue|already has state 1"):
        await store.save(forged)


async def test_deeply_nested_arguments_are_a_malformed_call(tools: list[FunctionTool]) -> None:
    deep = "[" * 1000 + "]" * 1000
    call = ToolCall.from_json("c1", "lire_commande", '{"numero": ' + deep + "}")
    assert call.malformed
    nested: Any = "x"
    for _ in range(1000):
        nested = [nested]
    scripted = call_reply(("lire_commande", {"numero": nested}))
    assert estimate_tokens(scripted.messages) > 0
    result = await Agent(ScriptedClient([scripted, "ok"]), tools).run("q")
    assert result.outcome.kind == "completed"
    res = result.transcript[2].tool_results[0]
    assert res.status == "error" and "nest too deeply" in res.content
