"""A policy's settings are part of the agent a run state belongs to: a run paused under
some settings is refused on resume under others, unless a migration carries it over."""

from __future__ import annotations

from typing import Annotated

import pytest

from tether import Agent, StateKeys, tool
from tether.errors import StateError
from tether.guards.callpolicy import ProvenancePolicy
from tether.guards.registry import Registry
from tether.providers.scripted import ScriptedClient, call_reply
from tether.run_state import RunState


@tool(requires_approval=True, effect="money", roles={"iban": "counterparty"}, thread=False)
def pay(iban: Annotated[str, "Account to pay."], amount: Annotated[float, "Euros."]) -> str:
    """Pay an account. Irreversible."""
    return f"paid {amount}"


KEYS = StateKeys.generate("k1")
PROMPT = "Pay FR7630006000011234567890189 9 euros."


def agent(policy: ProvenancePolicy, *, replies: list[object] | None = None, **kw: object) -> Agent:
    script = replies or [call_reply(("pay", {"iban": "FR7630006000011234567890189", "amount": 9}))]
    return Agent(ScriptedClient(script), [pay], policy=policy, state_key=KEYS, **kw)  # type: ignore[arg-type]


async def paused_under(policy: ProvenancePolicy) -> str:
    result = await agent(policy).run(PROMPT)
    assert result.outcome.kind == "awaiting_approval"
    assert result.state is not None
    return result.state.to_json()


async def test_a_changed_setting_refuses_the_resume_with_a_clear_error() -> None:
    state = await paused_under(ProvenancePolicy(max_prompts=5))
    decision = RunState.from_json(state, keys=KEYS).pending[0].approve()
    stricter = agent(ProvenancePolicy(max_prompts=5, strict=True), replies=["Paid."])
    with pytest.raises(StateError, match="its policy changed"):
        await stricter.resume(state, [decision])


async def test_the_same_settings_resume_and_a_migration_carries_a_change_over() -> None:
    before = ProvenancePolicy(known_counterparty=Registry(["x@example.com"]))
    state = await paused_under(before)
    decision = RunState.from_json(state, keys=KEYS).pending[0].approve()
    same = ProvenancePolicy(known_counterparty=Registry(["y@example.com"]))  # its data moves
    done = await agent(same, replies=["Paid."]).resume(state, [decision])
    assert done.outcome.kind == "completed"
    old = agent(before).fingerprint
    wider = ProvenancePolicy(known_counterparty=Registry(), max_prompts=10)
    assert agent(wider).fingerprint != old
    migrated = agent(wider, replies=["Paid."], state_migrations={old: lambda s: s})
    done = await migrated.resume(state, [decision])
    assert done.outcome.kind == "completed"


def test_every_setting_is_in_the_identity_and_defaults_keep_the_old_fingerprint() -> None:
    assert ProvenancePolicy().state_identity is None  # fingerprints made before still match
    changes: dict[str, object] = {
        "known_counterparty": Registry(),
        "application": lambda ctx: [],
        "strict": True,
        "scoped": True,
        "max_prompts": 2,
        "object_effects": frozenset({"money"}),
        "object_tools": frozenset({"pay"}),
        "members": Registry(),
        "authors": {"read_channel": "author"},
        "content_effects": frozenset({"communicate"}),
    }
    prints = {agent(ProvenancePolicy()).fingerprint}
    for name, value in changes.items():
        policy = ProvenancePolicy(**{name: value})  # type: ignore[arg-type]
        assert policy.state_identity is not None and name in policy.state_identity
        prints.add(agent(policy).fingerprint)
    assert len(prints) == len(changes) + 1
