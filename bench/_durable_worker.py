"""A worker process for bench/durable.py: takes agent runs from the ``bench`` queue.

    python bench/_durable_worker.py DATABASE_URL EXECUTOR_ID WORKDIR [DEAD_EXECUTOR_ID]

Each run: the scripted model (100 ms a call) asks for ``lookup``, then ``refund``
(irreversible, keyed by its idempotency key in WORKDIR/effects.sqlite), then answers.
The worker writes WORKDIR/ready-EXECUTOR_ID once started, takes runs once WORKDIR/go
exists, and exits when WORKDIR/stop exists.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from collections.abc import Sequence
from pathlib import Path

from dbos import DBOS

from tether import Agent, Limits, ToolCall, tool
from tether.clients import BaseChatClient, ChatOptions, ChatResponse
from tether.durable import DurableAgent, DurableConfig, idempotency_key, launch, recover_async
from tether.messages import Message, StopReason
from tether.tools import RunContext, ToolSpec

MODEL_SECONDS = 0.1
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "5"))
WORKDIR = Path(sys.argv[3]) if len(sys.argv) > 3 else Path(".")


class SlowScript(BaseChatClient):
    """Three turns, each answered after 100 ms."""

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        await asyncio.sleep(MODEL_SECONDS)
        turn = 1 + sum(1 for m in messages if m.role == "assistant")
        if turn == 1:
            calls = (ToolCall("l1", "lookup", {"order": "C-1042"}),)
        elif turn == 2:
            calls = (ToolCall("r1", "refund", {"amount": 5.0}),)
        else:
            return ChatResponse((Message.assistant("Refunded."),), StopReason.parse("end_turn"))
        return ChatResponse((Message("assistant", calls),), StopReason.parse("tool_use"))


@tool(thread=False)
def lookup(order: str) -> str:
    """Read an order. Use it first. It changes nothing."""
    return f"{order}: shipped"


@tool
def refund(amount: float, ctx: RunContext[None]) -> str:
    """Refund the customer. Use it after the lookup. It cannot be undone."""
    with sqlite3.connect(WORKDIR / "effects.sqlite", timeout=60) as db:
        db.execute("INSERT INTO attempts VALUES (?)", (ctx.run_id,))
        db.execute("INSERT OR IGNORE INTO refunds VALUES (?, ?)", (idempotency_key(ctx), amount))
    return "refunded"


AGENT = DurableAgent(Agent(SlowScript(), [lookup, refund], limits=Limits(max_turns=5)), "bench")


async def main() -> None:
    url, executor = sys.argv[1], sys.argv[2]
    launch(DurableConfig(url, executor_id=executor, polling_interval_seconds=0.05))
    (WORKDIR / f"ready-{executor}").touch()
    while not (WORKDIR / "go").exists():  # noqa: ASYNC110 (another process writes it)
        await asyncio.sleep(0.02)
    await DBOS.register_queue_async(
        "bench", worker_concurrency=CONCURRENCY, polling_interval_sec=0.05
    )
    if len(sys.argv) > 4:
        await recover_async([sys.argv[4]])
    while not (WORKDIR / "stop").exists():  # noqa: ASYNC110
        await asyncio.sleep(0.1)


if __name__ == "__main__":
    asyncio.run(main())
