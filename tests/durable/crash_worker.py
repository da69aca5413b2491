"""A durable worker for the crash-injection tests, run as a subprocess.

    python crash_worker.py SYSTEM_DB_URL EXECUTOR_ID

The environment gives the workflow ids to wait for (``CRASH_IDS``), the effects file
(``CRASH_EFFECTS``, SQLite: what the model and the tools really did), the ledger database
(``CRASH_LEDGER``, a SQLAlchemy URL) and the crash plan (``TETHER_CRASH_PLAN``). The
worker takes runs from the ``crash`` queue, and exits 0 once every listed run has ended;
the plan kills it with SIGKILL at its boundaries.

Each run: lookup x2 (one turn, concurrent) -> refund (needs approval; irreversible,
idempotent on its key) -> record (a transactional ledger write, no key at all) -> answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import time
from collections.abc import Sequence

import sqlalchemy as sa
from dbos import DBOS, SQLAlchemyDatasource

from tether import Agent, Limits, ToolCall, tool
from tether.clients import ChatClient, ChatResponse
from tether.durable import (
    DurableAgent,
    DurableConfig,
    TransactionalTool,
    idempotency_key,
    launch,
    recover_async,
    shutdown,
)
from tether.durable.crash import CrashingClient, CrashingTool, CrashPlan
from tether.messages import Message, StopReason
from tether.providers.scripted import ScriptedClient
from tether.tools import RunContext, Tool

QUEUE = "crash"
EFFECTS = os.environ.get("CRASH_EFFECTS", "")


def effects() -> sqlite3.Connection:
    return sqlite3.connect(EFFECTS, timeout=60, isolation_level=None)


def note(sql: str, *args: object) -> None:
    with effects() as db:
        db.execute(sql, args)


def script(history: Sequence[Message]) -> ChatResponse | str:
    turn = 1 + sum(1 for m in history if m.role == "assistant")
    note("INSERT INTO model_calls VALUES (?, ?, ?)", DBOS.workflow_id, turn, time.time())
    calls: tuple[ToolCall, ...] = ()
    if turn == 1:
        calls = (
            ToolCall("l1", "lookup", {"order": "C-1042"}),
            ToolCall("l2", "lookup", {"order": "C-2210"}),
        )
    elif turn == 2:
        calls = (ToolCall("r1", "refund", {"amount": 5.0}),)
    elif turn == 3:
        calls = (ToolCall("k1", "record", {"text": "refunded 5.00"}),)
    if not calls:
        return "Refunded 5.00 EUR on C-1042."
    return ChatResponse((Message("assistant", calls),), StopReason.parse("tool_use"))


@tool(thread=False)
def lookup(order: str, ctx: RunContext[None]) -> str:
    """Read an order's status. Use it before any refund. It changes nothing."""
    call = ctx.call.id if ctx.call else ""
    note("INSERT INTO tool_calls VALUES (?, ?, ?, ?)", ctx.run_id, call, "lookup", time.time())
    return f"{order}: shipped"


@tool(thread=False, requires_approval=True)
def refund(amount: float, ctx: RunContext[None]) -> str:
    """Refund the customer. Use it once the order is known. It cannot be undone."""
    key = idempotency_key(ctx)
    with effects() as db:
        call = ctx.call.id if ctx.call else ""
        db.execute(
            "INSERT INTO tool_calls VALUES (?, ?, ?, ?)", (ctx.run_id, call, "refund", time.time())
        )
        db.execute("INSERT OR IGNORE INTO refunds VALUES (?, ?, ?)", (key, ctx.run_id, amount))
    return f"refunded {amount:.2f}"


def main() -> None:
    url, executor = sys.argv[1], sys.argv[2]
    ids = set(json.loads(os.environ["CRASH_IDS"]))
    plan = CrashPlan.from_env()
    ledger = SQLAlchemyDatasource.create(os.environ["CRASH_LEDGER"])

    @tool(thread=False)
    def record(text: str, ctx: RunContext[None]) -> str:
        """Write a line in the ledger. Use it after a refund. It only writes that line."""
        ledger.sql_session().execute(
            sa.text("INSERT INTO ledger (run_id, text) VALUES (:r, :t)"),
            {"r": ctx.run_id, "t": text},
        )
        return "recorded"

    tools: list[Tool] = [lookup, refund, record]
    client: ChatClient = ScriptedClient(script, record=False)
    if plan is not None:  # inside the steps: before the work, after it (not yet logged)
        client = CrashingClient(client, plan)
        tools = [CrashingTool(t, plan) for t in tools]
    tools[2] = TransactionalTool(tools[2], ledger)
    agent = Agent(client, tools, limits=Limits(max_turns=8))
    CrashingAgent(agent, "crash", plan)
    asyncio.run(serve(url, executor, ids))


class CrashingAgent(DurableAgent):
    """Boundaries outside the steps too: before a step starts, after it is logged."""

    def __init__(self, agent: Agent[None], name: str, plan: CrashPlan | None) -> None:
        super().__init__(agent, name)
        self.plan = plan

    def _durable_agent(self) -> Agent[None]:
        agent = super()._durable_agent()
        if self.plan is not None:
            agent.client = CrashingClient(agent.client, self.plan, "model.start", "model.logged")
            agent.tools = {
                name: CrashingTool(t, self.plan, "tool.start", "tool.logged")
                for name, t in agent.tools.items()
            }
        return agent


async def serve(url: str, executor: str, ids: set[str]) -> None:
    launch(DurableConfig(url, executor_id=executor, polling_interval_seconds=0.05))
    await DBOS.register_queue_async(QUEUE, polling_interval_sec=0.05)
    dead = os.environ.get("CRASH_RECOVER")
    if dead:  # the procedure for a worker that will not come back
        await recover_async(dead.split(","))
    while True:
        done = await DBOS.list_workflows_async(
            workflow_ids=sorted(ids), status=["SUCCESS", "ERROR"], load_input=False
        )
        if len(done) == len(ids):
            break
        await asyncio.sleep(0.1)
    shutdown()


if __name__ == "__main__":
    main()
