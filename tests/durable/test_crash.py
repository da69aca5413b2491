"""Crash injection: a worker SIGKILLed at every step boundary of a run loses nothing.

One run per boundary, all in one worker: each run stops at its own boundary, then one
SIGKILL cuts them all there and the worker restarts with the same executor id (see
``harness``). The boundaries: inside each step before the work and after it (not yet
logged), and after each step is logged; "before step N" outside the step is "after step
N-1 is logged", with nothing durable in between, so it is not listed apart. The
approval's boundaries are among them: ``model.logged:2`` is the run awaiting approval
with its state not yet published, ``tool.start:2:refund`` the decision received and the
run resumed, ``model.logged:4`` the run ended before the workflow returned; and one run
waits for its approval while the worker is killed and the decision is sent. The run
whose point is inside the ledger's transaction starts once the others have stopped (a
run stopped there holds the ledger's lock).

Afterwards: every run completed; the irreversible refund took effect once per run; the
ledger line written by a transactional step exists once per run (it has no idempotency
key at all); each model request and tool call ran once, except the one killed between
its reply and the log, which ran exactly twice; the approval sent while no worker was
alive was applied.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import sqlalchemy as sa
from dbos import DBOS, DBOSClient
from harness import Harness, approve_all

from tether.durable import codec

POINTS = [
    "model.before:1",
    "model.returned:1",
    "model.logged:1",
    "tool.before:1:lookup",
    "tool.returned:1:lookup",
    "tool.logged:1:lookup",
    "model.returned:2",
    "model.logged:2",
    "tool.start:2:refund",
    "tool.before:2:refund",
    "tool.returned:2:refund",
    "tool.logged:2:refund",
    "tool.before:3:record",
    "tool.returned:3:record",  # inside the ledger's transaction: queued last
    "tool.logged:3:record",
    "model.before:4",
    "model.returned:4",
    "model.logged:4",
]
WAITING = "run-waiting"


def prepare(tmp_path: Path, ledger_url: str) -> Path:
    effects = tmp_path / "effects.sqlite"
    with sqlite3.connect(effects) as db:
        db.execute("CREATE TABLE model_calls (run_id TEXT, turn INTEGER, at REAL)")
        db.execute("CREATE TABLE tool_calls (run_id TEXT, call TEXT, tool TEXT, at REAL)")
        db.execute("CREATE TABLE refunds (key TEXT PRIMARY KEY, run_id TEXT, amount REAL)")
    engine = sa.create_engine(ledger_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE ledger (run_id TEXT, text TEXT)"))
        if engine.dialect.name == "sqlite":  # a run stopped in a transaction blocks no reader
            conn.execute(sa.text("PRAGMA journal_mode=WAL"))
    engine.dispose()
    return effects


async def crash_everywhere(tmp_path: Path, database_url: str, ledger_url: str) -> None:
    effects = prepare(tmp_path, ledger_url)
    points = {f"run-{i:02d}": p for i, p in enumerate(POINTS)}
    runs = [*points, WAITING]
    harness = Harness(
        database_url,
        tmp_path,
        {"CRASH_EFFECTS": str(effects), "CRASH_LEDGER": ledger_url},
    )
    late = frozenset(r for r, p in points.items() if p == "tool.returned:3:record")
    prompts = {r: "Refund my order C-1042." for r in runs}
    outcome = await harness.run(prompts, points, WAITING, late)

    fired = {m.name: m.read_text() for m in (tmp_path / "marks").iterdir()}
    assert fired == points  # every run stopped at its point, once
    assert (outcome.kills, outcome.starts) == (1, 2)
    assert outcome.sent_while_dead == [WAITING]
    client = DBOSClient(system_database_url=database_url)
    logged: dict[tuple[str, str], int] = {}  # (run, model turn or call id) -> logged at, ms
    try:
        for run in runs:
            handle = await asyncio.to_thread(client.retrieve_workflow, run)
            result = codec.result_from_json(await asyncio.to_thread(handle.get_result))
            assert result.outcome.kind == "completed", (run, result.outcome)
            results = [r.content for m in result.transcript for r in m.tool_results]
            assert "refunded 5.00" in results, (run, results)  # the approval was applied
            steps = await asyncio.to_thread(client.list_workflow_steps, run)
            models = [s for s in steps if s["function_name"] == "tether.model"]
            assert len(models) == 4
            logged.update(
                ((run, str(t)), s["completed_at_epoch_ms"]) for t, s in enumerate(models, 1)
            )
            tools = [s for s in steps if s["function_name"].startswith("tether.tool.")]
            calls = ["l1", "l2", "r1", "k1"]  # the reserved numbers follow the model's order
            assert [s["function_name"][12:] for s in tools] == [
                "lookup",
                "lookup",
                "refund",
                "record",
            ]
            logged.update(
                ((run, c), s["completed_at_epoch_ms"]) for c, s in zip(calls, tools, strict=True)
            )
    finally:
        client.destroy()

    with sqlite3.connect(effects) as db:
        refunds = db.execute("SELECT run_id, COUNT(*) FROM refunds GROUP BY run_id").fetchall()
        executions = [
            *db.execute("SELECT run_id, CAST(turn AS TEXT), at FROM model_calls"),
            *db.execute("SELECT run_id, call, at FROM tool_calls"),
        ]
    assert sorted(refunds) == sorted((r, 1) for r in runs)  # no refund twice, none lost
    engine = sa.create_engine(ledger_url)
    with engine.connect() as conn:
        ledger = conn.execute(sa.text("SELECT run_id, COUNT(*) FROM ledger GROUP BY run_id"))
        assert sorted(ledger.fetchall()) == sorted((r, 1) for r in runs)  # no key, still once
    engine.dispose()
    # A model request or tool call may run again only if the worker died before its
    # result was logged: none starts after its step's entry in the log.
    late = [(r, what, at) for r, what, at in executions if at * 1000 > logged[(r, what)] + 1]
    assert late == []
    again = {(r, w) for r, w, _ in executions if sum(1 for x in executions if x[:2] == (r, w)) > 1}
    lookup = {("run-04", "l1"), ("run-04", "l2")} & again  # the one that stopped there
    assert len(lookup) == 1  # the other lookup of that turn was logged
    assert again == {("run-01", "1"), *lookup, ("run-06", "2"), ("run-10", "r1"), ("run-16", "4")}


async def test_crash_at_every_boundary_sqlite(tmp_path: Path) -> None:
    ledger = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    await crash_everywhere(tmp_path, f"sqlite:///{tmp_path / 'dbos.sqlite'}", ledger)


async def test_crash_at_every_boundary_postgres(tmp_path: Path, pg_url: str) -> None:
    await crash_everywhere(tmp_path, pg_url, pg_url)


async def test_a_dead_workers_runs_finish_on_another_worker(tmp_path: Path, pg_url: str) -> None:
    """The procedure for a worker that does not come back: a live worker started with
    ``recover([dead id])`` puts its pending runs back on the queue and finishes them."""
    effects = prepare(tmp_path, pg_url)
    runs = [f"run-{i}" for i in range(6)]
    harness = Harness(pg_url, tmp_path, {"CRASH_EFFECTS": str(effects), "CRASH_LEDGER": pg_url})
    harness.env["CRASH_IDS"] = json.dumps(runs)
    DBOS.migrate(pg_url)
    client = DBOSClient(system_database_url=pg_url)
    answered: set[tuple[str, int]] = set()
    try:
        first = harness.worker(0, "w1")
        await harness.enqueue(client, {r: "Refund my order C-1042." for r in runs})
        while len(answered) < 2:  # w1 has started runs, some are past their approval
            await approve_all(client, runs, answered)
            await asyncio.sleep(0.05)
        first.kill()
        first.wait()
        held = await asyncio.to_thread(
            client.list_workflows, status="PENDING", executor_id="w1", load_input=False
        )
        assert held  # the dead worker left runs in progress
        second = harness.worker(1, "w2", CRASH_RECOVER="w1")
        for _ in range(6000):  # up to ten minutes on a loaded machine
            if second.poll() is not None:
                break
            await approve_all(client, runs, answered)
            await asyncio.sleep(0.1)
        assert second.wait(timeout=60) == 0, (tmp_path / "worker-1.log").read_text()[-3000:]
        for run in runs:
            handle = await asyncio.to_thread(client.retrieve_workflow, run)
            result = codec.result_from_json(await asyncio.to_thread(handle.get_result))
            assert result.outcome.kind == "completed", (run, result.outcome)
        status = await asyncio.to_thread(client.list_workflows, workflow_ids=runs, load_input=False)
        assert {
            s.executor_id for s in status if s.workflow_id in {h.workflow_id for h in held}
        } == {"w2"}
    finally:
        client.destroy()
    with sqlite3.connect(effects) as db:
        refunds = db.execute("SELECT run_id, COUNT(*) FROM refunds GROUP BY run_id").fetchall()
    assert sorted(refunds) == sorted((r, 1) for r in runs)
