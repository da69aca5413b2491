"""The store owns each run's sequence and leases a state to one resume at a time."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine

import state_worker
from forked import FORK, run_forked
from tether.errors import StateError
from tether.run_state import RunState
from tether.sql_state_store import SqlStateStore
from tether.state_store import MemoryStateStore, StateStore

WORKER = str(Path(state_worker.__file__))


def sql_store(tmp_path: Path, lease_seconds: float = 300.0) -> tuple[SqlStateStore, str]:
    url = f"sqlite:///{tmp_path / 'states.db'}"
    engine = create_engine(url, connect_args={"timeout": 60})
    return SqlStateStore(engine, lease_seconds=lease_seconds), url


async def stored_run(store: StateStore) -> RunState:
    state_worker.calls.clear()
    first = await state_worker.agent().run("refund me", store=store)
    assert first.state is not None
    loaded = await store.load(first.run_id)
    assert loaded == first.state
    return loaded


async def workers(
    url: str, run_id: str, ledger: Path, mode: str, n: int, lease: float
) -> list[str]:
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            WORKER,
            url,
            run_id,
            str(ledger),
            mode,
            str(lease),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(n)
    ]
    outs = await asyncio.gather(*(p.communicate() for p in procs))
    return [
        out.decode().strip() or f"rc={p.returncode} {err.decode()[-300:]}"
        for p, (out, err) in zip(procs, outs, strict=True)
    ]


async def test_eight_processes_resuming_one_state_run_the_tool_once(tmp_path: Path) -> None:
    store, url = sql_store(tmp_path)
    state = await stored_run(store)
    ledger = tmp_path / "ledger"
    outcomes = await workers(url, state.run_id, ledger, "normal", 8, 300.0)
    assert sorted(outcomes).count("completed") == 1, outcomes
    assert all(o == "completed" or o.startswith("refused:") for o in outcomes), outcomes
    keys = ledger.read_text().split()
    assert keys == [f"{state.run_id}:{p.call_id}" for p in state.pending]  # each call once
    assert await store.load(state.run_id) is None  # the run ended


async def test_a_resume_cancelled_after_the_claim_can_be_resumed_with_the_same_key(
    tmp_path: Path,
) -> None:
    for store in (MemoryStateStore(), sql_store(tmp_path)[0]):
        state = await stored_run(store)
        started = asyncio.Event()
        agent = state_worker.agent(["done"])
        inner = agent.tools["refund"]

        async def stuck(arguments: Any, ctx: Any, started: asyncio.Event = started) -> str:
            state_worker.calls.append(ctx.idempotency_key)
            started.set()
            await asyncio.sleep(3600)
            return "never"

        original = inner.invoke
        inner.invoke = stuck  # type: ignore[method-assign]
        task = asyncio.ensure_future(
            agent.resume(
                state, [state.pending[0].deny("no"), state.pending[1].approve()], store=store
            )
        )
        await asyncio.wait_for(started.wait(), 10)
        assert await store.claim(state.run_id, state.version) is None  # held while it runs
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        inner.invoke = original  # type: ignore[method-assign]
        again = await store.load(state.run_id)
        assert again == state
        done = await state_worker.agent(["done"]).resume(
            again, [again.pending[0].deny("no"), again.pending[1].approve()], store=store
        )
        assert done.outcome.kind == "completed"
        key = f"{state.run_id}:{state.pending[1].call_id}"
        assert state_worker.calls == [key, key]


async def test_a_resume_whose_process_is_killed_can_be_resumed_after_its_lease(
    tmp_path: Path,
) -> None:
    store, url = sql_store(tmp_path, lease_seconds=1.0)
    state = await stored_run(store)
    ledger = tmp_path / "ledger"
    (outcome,) = await workers(url, state.run_id, ledger, "kill", 1, 1.0)
    assert outcome.startswith("rc=-9"), outcome
    first_key = f"{state.run_id}:{state.pending[0].call_id}"
    assert ledger.read_text().split() == [first_key]
    with pytest.raises(StateError, match="already resumed or is being resumed"):
        await state_worker.agent(["done"]).resume(
            state, [p.approve() for p in state.pending], store=store
        )
    await asyncio.sleep(1.2)  # the dead process's lease expires
    (outcome,) = await workers(url, state.run_id, ledger, "normal", 1, 1.0)
    assert outcome == "completed"
    assert ledger.read_text().split() == [
        first_key,
        first_key,
        f"{state.run_id}:{state.pending[1].call_id}",
    ]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_an_old_state_or_a_forged_sequence_or_run_id_is_refused(
    tmp_path: Path, kind: str
) -> None:
    store: StateStore = MemoryStateStore() if kind == "memory" else sql_store(tmp_path)[0]
    state = await stored_run(store)
    agent = state_worker.agent(["done"])
    nxt = await agent.resume(state, [state.pending[0].approve()], store=store)
    assert nxt.state is not None and nxt.state.version == 2
    with pytest.raises(StateError, match="already resumed"):  # the genuine, older state
        await agent.resume(state.to_json(), [state.pending[1].approve()], store=store)
    for field, value in (("version", 2), ("version", 99), ("run_id", "another-run")):
        data = json.loads(nxt.state.to_json() if field == "run_id" else state.to_json())
        data[field] = value
        with pytest.raises(StateError, match="seal does not match"):
            await agent.resume(json.dumps(data), [state.pending[1].approve()], store=store)
    assert await store.claim(state.run_id, 99) is None
    assert await store.claim("another-run", 1) is None
    assert await store.claim(state.run_id, 2) is not None  # refused ones claimed nothing
    assert state_worker.calls == [f"{state.run_id}:{state.pending[0].call_id}"]


async def test_the_store_refuses_to_be_told_a_sequence(tmp_path: Path) -> None:
    store = sql_store(tmp_path)[0]
    state = await stored_run(store)
    lease = await store.claim(state.run_id, state.version)
    assert lease is not None
    later = replace(state, version=2).sealed(state_worker.agent().state_keys)
    with pytest.raises(StateError, match="already has state 1"):  # saved around the lease
        await store.save(later)
    await store.release(lease)
    assert await store.claim(state.run_id, state.version) is not None  # given back at once


async def test_sql_store_on_in_memory_sqlite() -> None:
    store = SqlStateStore(create_engine("sqlite://"))
    state = await stored_run(store)
    lease = await store.claim(state.run_id, state.version)
    assert lease is not None
    await store.finish(lease, None)
    assert await store.load(state.run_id) is None


def _create(url: str, barrier: Any, errors: Any) -> None:
    try:
        barrier.wait()
        SqlStateStore(create_engine(url, connect_args={"timeout": 30}))
    except Exception as exc:  # reported to the parent
        errors.put(f"{type(exc).__name__}: {exc}")


def test_processes_creating_the_tables_at_once_all_succeed(tmp_path: Path) -> None:
    errors = FORK.Queue()
    for round_ in range(12):
        url = f"sqlite:///{tmp_path / f'fresh{round_}.db'}"
        barrier = FORK.Barrier(4)
        assert run_forked(_create, [(url, barrier, errors)] * 4) == [0] * 4
    time.sleep(0.1)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert found == []


async def test_a_running_resume_renews_its_lease() -> None:
    store = MemoryStateStore(lease_seconds=0.3)
    state = await stored_run(store)
    agent = state_worker.agent(["done"])
    inner = agent.tools["refund"]
    original = inner.invoke

    async def slow(arguments: Any, ctx: Any) -> str:
        await asyncio.sleep(1.0)  # three lease lengths
        return await original(arguments, ctx)

    inner.invoke = slow  # type: ignore[method-assign]
    task = asyncio.ensure_future(agent.resume(state, approvals_of(state), store=store))
    for _ in range(4):
        await asyncio.sleep(0.2)
        assert await store.claim(state.run_id, state.version) is None  # still held
    result = await task
    assert result.outcome.kind == "completed"
    assert await store.load(state.run_id) is None


def approvals_of(state: RunState) -> list[Any]:
    return [p.approve() for p in state.pending]
