"""Stopping a process while a run waits: the run stays pending, resumes at the next launch,
and the stop prints no warning per cancelled run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = '''
import asyncio, sys
from tether import Agent, ScriptedClient, ToolCall, tool
from tether.clients import ChatResponse
from tether.durable import DurableAgent, DurableConfig, launch, pending_state, shutdown
from tether.durable import send_decisions
from tether.messages import Message, StopReason

@tool(requires_approval=True, thread=False)
def refund(amount: float) -> str:
    """Refund the customer. Use it when asked. It cannot be undone."""
    return f"refunded {amount:.2f}"

def model(history):
    if len(history) == 1:
        call = ToolCall("call_1", "refund", {"amount": 9.0})
        return ChatResponse((Message("assistant", (call,)),), StopReason.parse("tool_use"))
    return "done"

support = DurableAgent(Agent(ScriptedClient(model), [refund]), "support")

async def wait(wid):
    for _ in range(1200):
        if (state := await pending_state(wid)) is not None:
            return state
        await asyncio.sleep(0.05)
    raise SystemExit("never waited")

async def first():
    launch(DurableConfig(sys.argv[2], polling_interval_seconds=0.05))
    await wait(await support.start("Refund me.", workflow_id="w-1"))
    shutdown()  # the run is waiting for its approval; the loop then cancels it

async def second():
    launch(DurableConfig(sys.argv[2], polling_interval_seconds=0.05))
    state = await wait("w-1")
    await send_decisions("w-1", [p.approve() for p in state.pending])
    print("output:", (await support.result("w-1")).output)
    shutdown()

asyncio.run(first() if sys.argv[1] == "first" else second())
'''


def run(tmp_path: Path, step: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "stop.py"
    script.write_text(SCRIPT)
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    return subprocess.run(
        [sys.executable, str(script), step, url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


def test_a_stopped_waiting_run_resumes_and_the_stop_is_quiet(tmp_path: Path) -> None:
    done = run(tmp_path, "first")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "cancelled" not in done.stderr, done.stderr[-3000:]
    again = run(tmp_path, "second")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "output: done" in again.stdout


BUSY = '''
import asyncio, sys
from tether import Agent, ScriptedClient, ToolCall, tool
from tether.clients import ChatResponse
from tether.durable import DurableAgent, DurableConfig, launch, shutdown_async
from tether.messages import Message, StopReason

started = asyncio.Event()

@tool(thread=False)
async def slow_lookup(order: str) -> str:
    """Look the order up. Use it when asked. It changes nothing."""
    started.set()
    await asyncio.sleep(0.5)
    return f"order {order}: shipped"

def model(history):
    if len(history) == 1:
        call = ToolCall("call_1", "slow_lookup", {"order": "C-1"})
        return ChatResponse((Message("assistant", (call,)),), StopReason.parse("tool_use"))
    return "done"

support = DurableAgent(Agent(ScriptedClient(model), [slow_lookup]), "support")

async def first():
    launch(DurableConfig(sys.argv[2], polling_interval_seconds=0.05))
    await support.start("Where is C-1?", workflow_id="w-1")
    await started.wait()
    await shutdown_async()  # the run is inside its tool
    await asyncio.sleep(1.5)  # a run left going would reach its next step now
    print("stopped")

async def second():
    launch(DurableConfig(sys.argv[2], polling_interval_seconds=0.05))
    print("output:", (await support.result("w-1")).output)
    await shutdown_async()

asyncio.run(first() if sys.argv[1] == "first" else second())
'''


def test_a_run_inside_a_step_is_cancelled_by_the_stop_and_resumes(tmp_path: Path) -> None:
    script = tmp_path / "busy.py"
    script.write_text(BUSY)
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"

    def step(name: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(script), name, url],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )

    done = step("first")
    assert done.returncode == 0 and "stopped" in done.stdout, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "cancelled" not in done.stderr, done.stderr[-3000:]
    again = step("second")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "output: done" in again.stdout
    assert "Traceback" not in again.stderr, again.stderr[-3000:]
