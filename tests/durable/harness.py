"""Runs durable workers as subprocesses, kills them at step boundaries, restarts them.

The harness enqueues runs through a :class:`dbos.DBOSClient` (another process's view of
the database), approves every pending call from this process, and restarts the worker
each time a crash point kills it, with the same executor id. For the runs listed in
``kill_while_waiting`` it kills the worker itself once the run waits for approval, sends
the decision while no worker is alive, then restarts it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbos import DBOS, DBOSClient

from tether.durable import pending_state, send_decisions
from tether.durable.crash import ENV, CrashPlan

WORKER = Path(__file__).with_name("crash_worker.py")
SRC = Path(__file__).parents[2] / "src"


@dataclass
class Outcome:
    """What the harness saw."""

    kills: int = 0
    starts: int = 0
    sent_while_dead: list[str] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)


@dataclass
class Harness:
    database_url: str
    workdir: Path
    env: dict[str, str]
    queue: str = "crash"
    workflow_name: str = "tether.agent.crash"
    executor_id: str = "worker-1"
    deadline_seconds: float = 900.0

    def worker(
        self, n: int, executor_id: str | None = None, **extra_env: str
    ) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"worker-{n}.log", "wb")  # noqa: SIM115 (kept by the process)
        env = {**os.environ, **self.env, "PYTHONPATH": str(SRC), **extra_env}
        return subprocess.Popen(
            [sys.executable, str(WORKER), self.database_url, executor_id or self.executor_id],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    async def run(
        self,
        prompts: dict[str, str],
        points: dict[str, str],
        kill_while_waiting: set[str] = frozenset(),  # type: ignore[assignment]
    ) -> Outcome:
        marks = self.workdir / "marks"
        marks.mkdir(exist_ok=True)
        self.env[ENV] = CrashPlan(points, marks).to_env()
        self.env["CRASH_IDS"] = json.dumps(sorted(prompts))
        DBOS.migrate(self.database_url)  # the client does not create the tables
        client = DBOSClient(system_database_url=self.database_url)
        outcome = Outcome()
        try:
            return await self._drive(client, prompts, kill_while_waiting, outcome)
        finally:
            client.destroy()

    async def enqueue(self, client: DBOSClient, prompts: dict[str, str]) -> None:
        """Put the runs on the queue, from this process."""
        for wid, prompt in prompts.items():
            options: Any = {
                "queue_name": self.queue,
                "workflow_name": self.workflow_name,
                "workflow_id": wid,
            }
            await asyncio.to_thread(client.enqueue, options, prompt)

    async def _drive(
        self,
        client: DBOSClient,
        prompts: dict[str, str],
        kill_while_waiting: set[str],
        outcome: Outcome,
    ) -> Outcome:
        proc = self.worker(outcome.starts)
        outcome.starts += 1
        await self.enqueue(client, prompts)
        answered: set[tuple[str, int]] = set()
        killed_waiting: set[str] = set()
        deadline = time.monotonic() + self.deadline_seconds
        while True:
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"runs not done in time; see {self.workdir}/worker-*.log")
            code = proc.poll()
            if code == 0:
                return outcome
            if code is not None:
                if code != -signal.SIGKILL:
                    log = (self.workdir / f"worker-{outcome.starts - 1}.log").read_text()
                    raise AssertionError(f"worker failed ({code}):\n{log[-4000:]}")
                outcome.kills += 1
                proc = self.worker(outcome.starts)
                outcome.starts += 1
                continue
            for wid in prompts:
                state = await pending_state(wid, client=client)
                if state is None or (wid, state.turns) in answered:
                    continue
                if wid in kill_while_waiting and wid not in killed_waiting:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    outcome.kills += 1
                    killed_waiting.add(wid)
                    outcome.sent_while_dead.append(wid)
                    await send_decisions(wid, [p.approve() for p in state.pending], client=client)
                    answered.add((wid, state.turns))
                    proc = self.worker(outcome.starts)
                    outcome.starts += 1
                    break
                await send_decisions(wid, [p.approve() for p in state.pending], client=client)
                answered.add((wid, state.turns))
            await asyncio.sleep(0.1)


async def approve_all(client: DBOSClient, runs: list[str], answered: set[tuple[str, int]]) -> None:
    """Approve every call that waits, once per approval round."""
    for wid in runs:
        state = await pending_state(wid, client=client)
        if state is not None and (wid, state.turns) not in answered:
            await send_decisions(wid, [p.approve() for p in state.pending], client=client)
            answered.add((wid, state.turns))
