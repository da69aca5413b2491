"""Every byte of a paused state is sealed: any change to it runs nothing.

The state walked here is a real one, paused in the middle of a turn: a memo written by a
tool, rulings, a human decision already taken, results of calls that already ran, and a
pending call with the context the approver reads.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import state_worker
from tether.errors import StateError
from tether.loop import Agent
from tether.run_state import arguments_hash

Path = tuple[Any, ...]


async def paused() -> tuple[Agent[None], str]:
    """The agent and its state after the first of two refunds was approved and ran."""
    agent = state_worker.agent()
    first = await agent.run("refund me")
    assert first.state is not None
    second = await agent.resume(first.state, [first.state.pending[0].approve()])
    assert second.state is not None and second.outcome.kind == "awaiting_approval"
    data = json.loads(second.state.to_json())
    assert data["memo"] and data["ready_results"] and data["pending"][0]["context"]
    assert data["turn_metadata"]["decisions"] and data["turn_metadata"]["rulings"]
    return agent, second.state.to_json()


def paths(value: Any, at: Path = ()) -> Iterator[Path]:
    """Every path in a JSON document, containers included (not the root)."""
    if at:
        yield at
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, (*at, i))


def get(doc: Any, path: Path) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def mutate(doc: Any, path: Path, op: str, new: Any = None) -> Any:
    """A copy of ``doc`` with the value at ``path`` changed, deleted or retyped."""
    out = copy.deepcopy(doc)
    parent, key = get(out, path[:-1]), path[-1]
    old = parent[key]
    if op == "delete":
        del parent[key]
    elif op == "retype":
        parent[key] = [old] if not isinstance(old, list) else {"x": old}
    else:
        parent[key] = new if new is not None else changed(old)
    return out


def changed(value: Any) -> Any:
    """A different value of the same JSON type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, value[0] if value else 1]
    if isinstance(value, dict):
        return {**value, "injected": 1}
    return 0


def run_without_effect(agent: Agent[None], text: str) -> None:
    """Resuming ``text`` is a StateError and runs no tool."""
    state_worker.calls.clear()
    data = json.loads(text)
    decisions = []
    for p in data.get("pending") or []:
        if isinstance(p, dict):
            from tether.run_state import Decision

            decisions.append(
                Decision(
                    str(p.get("call_id")),
                    str(p.get("arguments_hash")),
                    True,
                    run_id=str(p.get("run_id")),
                )
            )
    import asyncio

    with pytest.raises(StateError):
        asyncio.run(agent.resume(text, decisions))
    assert state_worker.calls == []


@pytest.fixture(scope="module")
def state() -> tuple[Agent[None], str]:
    import asyncio

    return asyncio.run(paused())


def test_every_path_changed_deleted_or_retyped_is_refused(state: tuple[Agent[None], str]) -> None:
    agent, text = state
    doc = json.loads(text)
    every = list(paths(doc))
    assert len(every) > 60
    tried = 0
    for path in every:
        for op in ("change", "delete", "retype"):
            forged = mutate(doc, path, op)
            if forged == doc:
                continue
            run_without_effect(agent, json.dumps(forged))
            tried += 1
    assert tried >= 3 * len(every) - 5


def test_a_consistent_forgery_with_the_hash_recomputed_is_refused(
    state: tuple[Agent[None], str],
) -> None:
    agent, text = state
    doc = json.loads(text)
    forged = copy.deepcopy(doc)
    pending = forged["pending"][0]
    call = next(
        p
        for m in forged["transcript"]
        for p in m["parts"]
        if p.get("kind") == "tool_call" and p["id"] == pending["call_id"]
    )
    for target in (pending["arguments"], call["arguments"]):
        target["amount"] = 9000.0
    pending["arguments_hash"] = arguments_hash(pending["arguments"])
    forged["memo"]["refunded"] = 0.0  # and the budget kept in the memo reset
    pending["context"]["already_refunded"] = 0.0
    renamed = copy.deepcopy(doc)  # the tool renamed everywhere
    renamed["pending"][0]["tool"] = "read_order"
    for m in renamed["transcript"]:
        for p in m["parts"]:
            if p.get("id") == renamed["pending"][0]["call_id"]:
                p["name"] = "read_order"
    for bad in (forged, renamed):
        run_without_effect(agent, json.dumps(bad))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_value_anywhere_is_refused(state: tuple[Agent[None], str], data: st.DataObject) -> None:
    agent, text = state
    doc = json.loads(text)
    path = data.draw(st.sampled_from(list(paths(doc))), label="path")
    op = data.draw(st.sampled_from(["change", "delete", "retype", "replace"]), label="op")
    forged = mutate(doc, path, op, data.draw(JSON, label="value") if op == "replace" else None)
    if forged == doc:
        return
    run_without_effect(agent, json.dumps(forged))


def test_the_untouched_state_resumes(state: tuple[Agent[None], str]) -> None:
    """The control: the same path with no mutation runs the refund."""
    import asyncio

    agent, text = state
    state_worker.calls.clear()
    doc = json.loads(text)
    from tether.run_state import RunState

    loaded = RunState.from_json(text)
    result = asyncio.run(agent.resume(text, [p.approve() for p in loaded.pending]))
    assert result.outcome.kind == "completed"
    assert state_worker.calls == [f"{doc['run_id']}:{doc['pending'][0]['call_id']}"]
