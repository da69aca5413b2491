"""Runs durable workers as subprocesses, kills them at step boundaries, restarts them.

The harness enqueues runs through a :class:`dbos.DBOSClient` (another process's view of
the database) and approves every pending call from this process. Each run has its own
crash point, where it stops (the plan ``parks``); once every run has stopped at its point
and the run kept waiting waits for its approval, the harness SIGKILLs the worker: one
kill cuts every run at its own boundary. The ``late`` runs are queued once the others
have stopped: a run stopped inside a transaction holds its locks (all of SQLite's), which
would keep the others short of their points. It sends the kept run's decision while no
worker is alive, then restarts the worker with the same executor id, which finishes
every run.
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
        waiting: str,
        late: frozenset[str] = frozenset(),
    ) -> Outcome:
        marks = self.workdir / "marks"
        marks.mkdir(exist_ok=True)
        self.env[ENV] = CrashPlan(points, marks, park=True).to_env()
        self.env["CRASH_IDS"] = json.dumps(sorted(prompts))
        DBOS.migrate(self.database_url)  # the client does not create the tables
        client = DBOSClient(system_database_url=self.database_url)
        try:
            return await self._drive(client, prompts, points, waiting, late, Outcome())
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
        points: dict[str, str],
        waiting: str,
        late: frozenset[str],
        outcome: Outcome,
    ) -> Outcome:
        proc = self.worker(outcome.starts)
        outcome.starts += 1
        await self.enqueue(client, {r: p for r, p in prompts.items() if r not in late})
        answered: set[tuple[str, int]] = set()
        deadline = time.monotonic() + self.deadline_seconds
        others = [r for r in prompts if r != waiting]
        queued_late = not late
        while True:  # every run stops at its point; the kept one waits for approval
            self._check(proc, outcome, deadline)
            await approve_all(client, others, answered)
            stopped = {m.name for m in (self.workdir / "marks").iterdir()}
            if not queued_late and set(points) - {waiting} - late <= stopped:
                await self.enqueue(client, {r: prompts[r] for r in late})
                queued_late = True
            if set(points) - {waiting} <= stopped:
                state = await pending_state(waiting, client=client)
                if state is not None:
                    break
            await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        outcome.kills += 1
        await send_decisions(waiting, [p.approve() for p in state.pending], client=client)
        answered.add((waiting, state.turns))
        outcome.sent_while_dead.append(waiting)
        proc = self.worker(outcome.starts)
        outcome.starts += 1
        while proc.poll() is None:  # the worker exits once every run has ended
            self._check(proc, outcome, deadline)
            await approve_all(client, list(prompts), answered)
            await asyncio.sleep(0.05)
        if proc.returncode != 0:
            log = (self.workdir / f"worker-{outcome.starts - 1}.log").read_text()
            raise AssertionError(f"worker failed ({proc.returncode}):\n{log[-4000:]}")
        return outcome

    def _check(self, proc: subprocess.Popen[bytes], outcome: Outcome, deadline: float) -> None:
        code = proc.poll()
        if code not in (None, 0):
            log = (self.workdir / f"worker-{outcome.starts - 1}.log").read_text()
            raise AssertionError(f"worker failed ({code}):\n{log[-4000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"runs not done in time; see {self.workdir}/worker-*.log")


async def approve_all(client: DBOSClient, runs: list[str], answered: set[tuple[str, int]]) -> None:
    """Approve every call that waits, once per approval round."""
    for wid in runs:
        state = await pending_state(wid, client=client)
        if state is not None and (wid, state.turns) not in answered:
            await send_decisions(wid, [p.approve() for p in state.pending], client=client)
            answered.add((wid, state.turns))
