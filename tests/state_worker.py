"""A refund agent whose paused state other processes resume (used by the run-state tests).

Run as a script: ``python state_worker.py DB_URL RUN_ID LEDGER MODE [LEASE_SECONDS]`` loads
the run's state from the SQL store at ``DB_URL`` and resumes it with an approval. The refund
appends its idempotency key to ``LEDGER``; ``MODE`` ``kill`` SIGKILLs the process right
after. Prints ``completed`` or ``refused: <error>``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

from tether.errors import StateError
from tether.guards.approval import requires_approval
from tether.loop import Agent
from tether.providers.scripted import ScriptedClient, call_reply
from tether.rulings import CallPolicy
from tether.state_seal import StateKeys
from tether.tools import RunContext, Tool, tool

LEDGER_ENV = "STATE_WORKER_LEDGER"
KILL_ENV = "STATE_WORKER_KILL"
calls: list[str] = []
"""Idempotency keys of the refunds run in this process."""


@tool(thread=False, effect="money")
def refund(amount: Annotated[float, "Amount in euros."], ctx: RunContext[Any]) -> str:
    """Refund the ticket's order. Irreversible."""
    calls.append(ctx.idempotency_key)
    ledger = os.environ.get(LEDGER_ENV)
    if ledger:
        with open(ledger, "a") as f:
            f.write(ctx.idempotency_key + "\n")
        time.sleep(0.2)  # the other resumes try while this one runs
    if os.environ.get(KILL_ENV):
        os.kill(os.getpid(), signal.SIGKILL)
    ctx.memo["refunded"] = float(ctx.memo.get("refunded", 0.0)) + amount
    return f"refunded {amount}"


@tool(thread=False, effect="read")
def read_order(order: Annotated[str, "Order number, like C-1042."]) -> str:
    """Read an order's status and amount. Changes nothing."""
    return f"{order}: delivered, 89.90 paid"


def approval_context(arguments: Any, ctx: RunContext[Any]) -> dict[str, Any]:
    return {"paid": 89.9, "already_refunded": ctx.memo.get("refunded", 0.0)}


def tools() -> list[Tool]:
    return [requires_approval(refund, context=approval_context), read_order]


def agent(
    script: list[Any] | None = None,
    *,
    keys: StateKeys | None = None,
    policy: CallPolicy | None = None,
    tool_list: list[Tool] | None = None,
) -> Agent[None]:
    """The agent; its default script pauses on two refunds and a read, then answers."""
    if script is None:
        script = [
            call_reply(
                ("refund", {"amount": 9.0}),
                ("refund", {"amount": 5.0}),
                ("read_order", {"order": "C-1042"}),
            ),
            "done",
        ]
    return Agent(
        ScriptedClient(script),
        tool_list if tool_list is not None else tools(),
        state_key=keys,
        policy=policy,
    )


async def resume_from_store(url: str, run_id: str, lease_seconds: float) -> str:
    from sqlalchemy import create_engine

    from tether.sql_state_store import SqlStateStore

    store = SqlStateStore(
        create_engine(url, connect_args={"timeout": 60}), lease_seconds=lease_seconds
    )
    state = await store.load(run_id)
    if state is None:
        return "refused: no state"
    try:
        result = await agent(["done", "done"]).resume(
            state, [p.approve() for p in state.pending], store=store
        )
    except StateError as exc:
        return f"refused: {exc}"
    return result.outcome.kind


if __name__ == "__main__":
    url, run_id, ledger, mode = sys.argv[1:5]
    lease = float(sys.argv[5]) if len(sys.argv) > 5 else 300.0
    os.environ[LEDGER_ENV] = ledger
    if mode == "kill":
        os.environ[KILL_ENV] = "1"
    print(asyncio.run(resume_from_store(url, run_id, lease)), flush=True)
    sys.stdout.flush()
    Path(ledger).touch()
