"""Keys: where they come from, rotation, no key, and the agent a state is bound to."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest

import state_worker
from tether.errors import ConfigError, StateError
from tether.run_state import RunState
from tether.sql_state_store import SqlStateStore
from tether.state_seal import (
    INSECURE_UNSEALED_STATES_FOR_TESTS,
    KEYS_ENV,
    StateKeys,
)
from tether.state_store import MemoryStateStore
from tether.tools import RunContext, tool


async def paused(keys: StateKeys | None) -> RunState:
    first = await state_worker.agent(keys=keys).run("refund me")
    assert first.state is not None
    return first.state


def approvals(state: RunState) -> list[Any]:
    return [p.approve() for p in state.pending]


async def test_a_state_sealed_with_the_old_key_resumes_after_rotation() -> None:
    old = StateKeys.generate("2025")
    state = await paused(old)
    rotated = old.rotated("2026")
    assert rotated.key_ids == ("2026", "2025")
    text = state.to_json()
    assert json.loads(text)["seal"].startswith("2025:")
    agent = state_worker.agent(["done"], keys=rotated)
    nxt = await agent.resume(text, [state.pending[0].approve()])
    assert nxt.state is not None and nxt.state.to_json().count('"seal": "2026:') == 1
    # the old key removed: what it sealed is refused, naming the key id, not the secret
    retired = rotated.without("2025")
    with pytest.raises(StateError, match="'2025', which is not configured") as caught:
        await state_worker.agent(["done"], keys=retired).resume(text, approvals(state))
    assert old.dumps().split(":", 1)[1] not in str(caught.value)
    done = await state_worker.agent(["done"], keys=retired).resume(
        nxt.state.to_json(), approvals(nxt.state)
    )
    assert done.outcome.kind == "completed"


async def test_keys_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    ring = StateKeys.generate("env1")
    monkeypatch.setenv(KEYS_ENV, ring.dumps())
    state = await paused(None)
    assert RunState.from_json(state.to_json()) == state
    with pytest.raises(StateError, match="seal does not match"):
        RunState.from_json(state.to_json(), keys=StateKeys([("env1", "y" * 40)]))
    monkeypatch.setenv(KEYS_ENV, "nonsense")
    with pytest.raises(ConfigError, match="id:secret"):
        StateKeys.from_env()
    with pytest.raises(ConfigError, match="too short"):
        StateKeys.parse("k:short")


async def test_without_a_key_a_state_resumes_here_and_cannot_leave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(KEYS_ENV)
    agent = state_worker.agent()
    first = await agent.run("refund me")
    assert first.state is not None
    with pytest.raises(ConfigError) as caught:
        first.state.to_json()
    message = str(caught.value)
    assert "\n" not in message and f"set {KEYS_ENV}=id:secret" in message
    from sqlalchemy import create_engine

    with pytest.raises(ConfigError, match=KEYS_ENV):
        await SqlStateStore(create_engine("sqlite://")).save(first.state)
    with pytest.raises(ConfigError, match=KEYS_ENV):
        RunState.from_json("{}")
    memory = MemoryStateStore()  # in this process: fine
    await memory.save(first.state)
    done = await agent.resume(first.state, approvals(first.state), store=memory)
    assert done.outcome.kind == "completed"
    with pytest.raises(StateError, match=r"seal does not match|not configured"):  # another agent
        await state_worker.agent().resume(first.state, approvals(first.state))


async def test_unsealed_states_only_with_the_loudly_named_opt_in() -> None:
    state = await paused(None)
    data = {**json.loads(state.to_json()), "format": 2, "seal": ""}
    del data["agent"]
    text = json.dumps(data)
    with pytest.raises(StateError, match=r"not sealed|seal does not match"):
        await state_worker.agent().resume(text, approvals(state))
    agent = state_worker.agent(["done"], keys=INSECURE_UNSEALED_STATES_FOR_TESTS)
    assert repr(agent.state_keys) == "INSECURE_UNSEALED_STATES_FOR_TESTS"
    done = await agent.resume(text, approvals(state))
    assert done.outcome.kind == "completed"


@tool(thread=False, effect="money")
def refund(amount: Annotated[float, "Amount in euros."], ctx: RunContext[Any]) -> str:
    """Refund the ticket's order, no approval asked. Irreversible."""
    state_worker.calls.append(ctx.idempotency_key)
    return "refunded"


async def test_a_state_resumed_on_another_agent_is_refused_unless_migrated() -> None:
    state = await paused(None)
    original = state_worker.agent()
    lax = state_worker.agent(["done"], tool_list=[refund, state_worker.read_order])
    assert lax.fingerprint != original.fingerprint
    state_worker.calls.clear()
    with pytest.raises(StateError, match="paused by another agent"):
        await lax.resume(state.to_json(), approvals(state))
    assert state_worker.calls == []
    # a deploy that changes a tool on purpose carries its states over explicitly
    seen: list[str] = []

    def migrate(old: RunState) -> RunState:
        seen.append(old.agent)
        return old

    migrated = state_worker.agent(["done"], tool_list=[refund, state_worker.read_order])
    migrated.state_migrations = {original.fingerprint: migrate}
    done = await migrated.resume(state.to_json(), approvals(state))
    assert done.outcome.kind == "completed" and seen == [original.fingerprint]


def test_no_secret_in_reprs_or_errors() -> None:
    ring = StateKeys.generate("k1")
    secret = ring.dumps().split(":", 1)[1]
    assert secret not in repr(ring)
    with pytest.raises(StateError) as caught:
        ring.verify("k1:00", b"body")
    assert secret not in str(caught.value)


async def test_a_legacy_state_is_resealed_only_on_purpose() -> None:
    from tether.state_gate import reseal_legacy

    state = await paused(None)
    agent = state_worker.agent(["done"])
    old = json.loads(state.to_json())
    del old["seal"], old["agent"]
    old["format"] = 2
    with pytest.raises(StateError, match=r"not sealed|seal does not match"):
        await agent.resume(json.dumps(old), approvals(state))
    with pytest.raises(StateError, match="only a state of format 1 or 2"):
        reseal_legacy(state.to_json(), agent.state_keys, agent.fingerprint)
    resealed = reseal_legacy(json.dumps(old), agent.state_keys, agent.fingerprint)
    done = await agent.resume(resealed.to_json(), approvals(resealed))
    assert done.outcome.kind == "completed"
