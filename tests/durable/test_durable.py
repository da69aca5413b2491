"""Durable runs in one process (SQLite): steps, approvals as durable waits, decisions."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import sqlalchemy as sa
from dbos import DBOS, SQLAlchemyDatasource

from tether import Agent, ToolCall, ToolFailure, tool
from tether.clients import ChatResponse
from tether.durable import (
    DECISIONS_TOPIC,
    DurableAgent,
    DurableConfig,
    TransactionalTool,
    idempotency_key,
    launch,
    pending_state,
    send_decisions,
    shutdown,
)
from tether.errors import ConfigError, StateError
from tether.messages import Message, StopReason
from tether.providers.scripted import ScriptedClient
from tether.replay.cassette import response_from_dict, response_to_dict
from tether.tools import RunContext

effects: list[str] = []


@tool(thread=False)
def lookup(order: str) -> str:
    """Read an order. Use it first. It changes nothing."""
    effects.append(f"lookup {order}")
    return f"{order}: shipped"


@tool(thread=False, requires_approval=True)
def refund(amount: float, ctx: RunContext[None]) -> str:
    """Refund the customer. Use it after reading the order. It cannot be undone."""
    effects.append(f"refund {amount} {idempotency_key(ctx)}")
    return f"refunded {amount:.2f}"


@tool(thread=False)
def broken(order: str) -> str:
    """Fail on purpose. Use it never. It does nothing."""
    raise ValueError(f"no such order {order}")


def script(history: Sequence[Message]) -> ChatResponse | str:
    turn = 1 + sum(1 for m in history if m.role == "assistant")
    calls: tuple[ToolCall, ...] = ()
    if turn == 1:  # no ids: the durable client gives them, deterministically
        calls = (
            ToolCall("", "lookup", {"order": "C-1"}),
            ToolCall("", "broken", {"order": "C-2"}),
            ToolCall("", "lookup", {"order": "C-3"}),
        )
    elif turn == 2 and "refund" in history[0].text:
        calls = (ToolCall("r1", "refund", {"amount": 5.0}),)
    if not calls:
        return "done"
    return ChatResponse((Message("assistant", calls),), StopReason.parse("tool_use"))


_ledger_dir = Path(tempfile.mkdtemp(prefix="tether-ledger-"))
ledger = SQLAlchemyDatasource.create(f"sqlite:///{_ledger_dir / 'ledger.sqlite'}")  # before launch


@tool(thread=False)
def record(text: str) -> str:
    """Write a ledger line. Use it after a refund. It writes only that line."""
    ledger.sql_session().execute(sa.text("INSERT INTO ledger VALUES (:t)"), {"t": text})
    if text == "fail":
        raise ToolFailure("the ledger refused that line")
    return "recorded"


agent = Agent(ScriptedClient(script), [lookup, refund, broken])
support = DurableAgent(agent, "test.support")
patient = DurableAgent(Agent(ScriptedClient(script), [lookup, refund, broken]), "test.patient")
hasty = DurableAgent(
    Agent(ScriptedClient(script), [lookup, refund, broken]), "test.hasty", approval_timeout=0.3
)


@pytest.fixture(scope="module", autouse=True)
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    path = tmp_path_factory.mktemp("durable") / "dbos.sqlite"
    launch(DurableConfig(f"sqlite:///{path}", polling_interval_seconds=0.05))
    yield
    shutdown()
    shutil.rmtree(_ledger_dir)


async def wait_pending(workflow_id: str) -> object:
    for _ in range(1200):  # up to a minute on a loaded machine
        state = await pending_state(workflow_id)
        if state is not None:
            return state
        await asyncio.sleep(0.05)
    raise AssertionError(f"{workflow_id} never waited for approval")


async def test_each_request_and_call_is_a_step_in_the_models_order() -> None:
    effects.clear()
    result = await support.run("Where is C-1?", workflow_id="steps-1")
    assert result.output == "done"
    assert result.run_id == "steps-1"
    calls = result.transcript[1].tool_calls
    assert [c.id for c in calls] == ["call_1", "call_2", "call_3"]
    assert result.transcript[2].tool_results[1].is_error
    assert "Tool 'broken' failed." in result.transcript[2].tool_results[1].content
    steps = await DBOS.list_workflow_steps_async("steps-1")
    names = [s["function_name"] for s in steps]
    assert names[:5] == [
        "tether.model",
        "tether.tool.lookup",
        "tether.tool.broken",
        "tether.tool.lookup",
        "tether.model",
    ]
    assert steps[1]["output"] == {"text": "C-1: shipped"}
    assert steps[3]["output"] == {"text": "C-3: shipped"}
    assert sorted(effects) == ["lookup C-1", "lookup C-3"]


async def test_a_run_id_is_started_once() -> None:
    effects.clear()
    await support.run("Where is C-1?", workflow_id="once-1")
    again = await support.run("Where is C-1?", workflow_id="once-1")
    assert again.output == "done"
    assert len(effects) == 2  # the second start found the finished run


async def test_an_approval_waits_and_resumes_with_the_decision_sent() -> None:
    effects.clear()
    wid = await support.start("Please refund me.", workflow_id="approve-1")
    state = await wait_pending(wid)
    assert [p.tool for p in state.pending] == ["refund"]  # type: ignore[attr-defined]
    assert effects == ["lookup C-1", "lookup C-3"] or sorted(effects) == [
        "lookup C-1",
        "lookup C-3",
    ]
    await send_decisions(wid, [p.approve() for p in state.pending])  # type: ignore[attr-defined]
    result = await support.result(wid)
    assert result.output == "done"
    assert effects[-1] == "refund 5.0 approve-1:r1"
    assert await pending_state(wid) is None


async def test_a_denial_reaches_the_model_and_runs_nothing() -> None:
    effects.clear()
    wid = await support.start("Please refund me.", workflow_id="deny-1")
    state = await wait_pending(wid)
    await send_decisions(wid, [p.deny("not eligible") for p in state.pending])  # type: ignore[attr-defined]
    result = await support.result(wid)
    assert not any(e.startswith("refund") for e in effects)
    denied = result.transcript[4].tool_results[0]
    assert denied.is_error and "not eligible" in denied.content


async def test_wrong_decisions_are_refused_before_sending() -> None:
    wid = await patient.start("Please refund me.", workflow_id="wrong-1")
    state = await wait_pending(wid)
    pending = state.pending[0]  # type: ignore[attr-defined]
    forged = type(pending.approve())(pending.call_id, "0" * 64, True, run_id=wid)
    with pytest.raises(StateError, match="other arguments"):
        await send_decisions(wid, [forged])
    with pytest.raises(StateError, match="no call 'nope'"):
        await send_decisions(wid, [type(forged)("nope", "0", True, run_id=wid)])
    with pytest.raises(StateError, match="not waiting"):
        await send_decisions("steps-1", [pending.approve()])
    # A forged message sent around the check is ignored by the run, which keeps waiting.
    await DBOS.send_async(
        wid,
        [{"call_id": pending.call_id, "arguments_hash": "x", "approved": True}],
        DECISIONS_TOPIC,
    )
    await DBOS.send_async(wid, "garbage", DECISIONS_TOPIC)
    await asyncio.sleep(0.3)
    assert await pending_state(wid) is not None
    await send_decisions(wid, [pending.approve()])
    result = await patient.result(wid)
    assert "refunded 5.00" in result.transcript[4].tool_results[0].content


async def test_an_unanswered_approval_is_denied_at_the_timeout() -> None:
    effects.clear()
    result = await hasty.run("Please refund me.", workflow_id="late-1")
    assert result.output == "done"
    assert not any(e.startswith("refund") for e in effects)
    assert "no decision within 0.3 seconds" in result.transcript[4].tool_results[0].content


def test_names_and_timeouts_are_checked() -> None:
    with pytest.raises(ConfigError, match="already exists"):
        DurableAgent(agent, "test.support")
    with pytest.raises(ConfigError, match="positive"):
        DurableAgent(agent, "test.other", approval_timeout=0)
    with pytest.raises(ConfigError, match="sqlite"):
        DurableConfig("mysql://x")


async def test_a_transactional_tool_commits_its_writes_or_none() -> None:
    with ledger.engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE ledger (text TEXT)"))
    tx = TransactionalTool(record, ledger)
    ctx: RunContext[None] = RunContext(None, "r", ToolCall("c", "record", {}))
    assert await tx.invoke({"text": "ok"}, ctx) == "recorded"
    with pytest.raises(ToolFailure, match="refused"):
        await tx.invoke({"text": "fail"}, ctx)
    with ledger.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT text FROM ledger")).fetchall()
    assert rows == [("ok",)]  # the failing call's row was rolled back


def test_the_log_keeps_responses_and_errors_as_plain_data() -> None:
    from tether.durable import codec
    from tether.errors import ProviderError

    response = ChatResponse(
        (Message("assistant", (ToolCall("a", "lookup", {"order": "C-1"}),), {"k": [1]}),),
        StopReason.parse("tool_use"),
    )
    assert response_from_dict(response_to_dict(response)) == response
    with pytest.raises(ProviderError, match="slow") as raised:
        codec.model_outcome_from_json(
            codec.model_error_to_json(ProviderError("slow", kind="timeout", status=504))
        )
    assert (raised.value.kind, raised.value.status) == ("timeout", 504)
    with pytest.raises(Exception, match="boom") as replayed:
        codec.tool_outcome_from_json(codec.tool_error_to_json(KeyError("boom")))
    assert type(replayed.value).__name__ == "KeyError"  # the model reads the same text


def test_the_sqlite_log_keeps_a_pool_of_connections_in_wal_mode(tmp_path: Path) -> None:
    """The log's threads (event loop workers, queue, poller) each keep a connection open
    rather than reopening one, with its pragmas, for a step; WAL with the chosen sync."""
    from tether.durable.runtime import SQLITE_POOL_SIZE

    config = DurableConfig(f"sqlite:///{tmp_path / 'log.sqlite'}", sqlite_synchronous="NORMAL")
    engine = config.dbos_config()["system_database_engine"]
    assert engine.pool.size() == SQLITE_POOL_SIZE >= 16
    with engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    engine.dispose()
