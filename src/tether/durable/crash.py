"""Crash injection for durable runs: SIGKILL the worker at a chosen step boundary, once.

A :class:`CrashPlan` names, for each workflow id, one boundary where its worker dies:

* ``model.before`` / ``model.returned``: inside the model step, before the request and
  after the reply, before DBOS logs it (the request is repeated on recovery);
* ``model.logged``: after the step's output is in the log;
* ``tool.before`` / ``tool.returned`` / ``tool.logged``: the same around a tool step
  (``tool.returned`` is the worst case for an irreversible tool: its effect is done, the
  log does not know it);
* ``approval.requested``: the run is awaiting approval, its state not yet published;
  ``approval.received``: the decisions are logged, the resumed run has not started;
* ``run.done``: the run ended, the workflow has not returned.

A point is written ``BOUNDARY``, ``BOUNDARY:TURN`` or ``BOUNDARY:TURN:TOOL``. Each point
fires once across restarts (a marker file is written first), so the restarted worker
replays past it. Wrap the agent's client with :class:`CrashingClient`, its tools with
:class:`CrashingTool`, and add :meth:`CrashPlan.listener` to its listeners; the plan
comes from the environment variable ``TETHER_CRASH_PLAN`` (JSON ``{"marks": DIR,
"points": {WORKFLOW_ID: POINT}, "park": BOOL}``).

With ``park``, a run that reaches its point does not kill the worker: it stops there (it
waits forever) and the test kills the worker once every run has reached its point, so
one SIGKILL cuts every run at its own boundary. Parking needs an ``await``: the wrappers
park (give them the boundary names to use, inside or outside the durable step), the
listener's points (called synchronously) always kill.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbos import DBOS

from tether.clients import ChatClient, ChatOptions, ChatResponse, DelegatingChatClient
from tether.events import Event, ModelResponse, RunFinished, RunStarted, ToolCallFinished
from tether.messages import Message
from tether.tools import DelegatingTool, RunContext, Tool, ToolSpec

ENV = "TETHER_CRASH_PLAN"
_dying = threading.Lock()


@dataclass(slots=True)
class CrashPlan:
    """Where each workflow's worker dies (see the module docstring)."""

    points: Mapping[str, str]
    marks: Path
    park: bool = False
    """Stop at the point and wait to be killed, instead of killing the worker."""
    _starts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_env(cls) -> CrashPlan | None:
        """The plan in ``TETHER_CRASH_PLAN``, or ``None``."""
        text = os.environ.get(ENV)
        if not text:
            return None
        data = json.loads(text)
        return cls(dict(data["points"]), Path(data["marks"]), bool(data.get("park")))

    def to_env(self) -> str:
        """The value of ``TETHER_CRASH_PLAN`` for this plan."""
        data = {"points": dict(self.points), "marks": str(self.marks), "park": self.park}
        return json.dumps(data)

    def reached(self, boundary: str, turn: int | None = None, tool: str = "") -> None:
        """Die here if this is the current workflow's point and it has not fired yet."""
        if self._fire(boundary, turn, tool):
            os.kill(os.getpid(), signal.SIGKILL)

    async def arrive(self, boundary: str, turn: int | None = None, tool: str = "") -> None:
        """Stop here (``park``) or die, if this is the current workflow's point and it
        has not fired yet."""
        if self._fire(boundary, turn, tool):
            if not self.park:
                os.kill(os.getpid(), signal.SIGKILL)
            await asyncio.Event().wait()  # until the test kills the worker

    def _fire(self, boundary: str, turn: int | None, tool: str) -> bool:
        workflow_id = DBOS.workflow_id
        if workflow_id is None:
            return False
        point = self.points.get(workflow_id)
        if point is None or not _matches(point, boundary, turn, tool):
            return False
        mark = self.marks / workflow_id
        with _dying:  # one point per death, even when two threads reach theirs at once
            if mark.exists():
                return False
            with open(mark, "w") as f:
                f.write(point)
                f.flush()
                os.fsync(f.fileno())
        return True

    def listener(self, event: Event) -> None:
        """The boundaries seen from the loop's events (after a step is logged)."""
        if isinstance(event, ModelResponse):
            self.reached("model.logged", event.turn)
        elif isinstance(event, ToolCallFinished):
            self.reached("tool.logged", event.turn, event.call.name)
        elif isinstance(event, RunStarted):
            n = self._starts[event.run_id] = self._starts.get(event.run_id, 0) + 1
            if n > 1:
                self.reached("approval.received")
        elif isinstance(event, RunFinished):
            if event.outcome.kind == "awaiting_approval":
                self.reached("approval.requested")
            else:
                self.reached("run.done")


def _matches(point: str, boundary: str, turn: int | None, tool: str) -> bool:
    name, _, rest = point.partition(":")
    if name != boundary:
        return False
    want_turn, _, want_tool = rest.partition(":")
    if want_turn and (turn is None or int(want_turn) != turn):
        return False
    return not want_tool or want_tool == tool


class CrashingClient(DelegatingChatClient):
    """Reaches ``model.before`` and ``model.returned`` around each request (other names
    for a wrapper outside the durable client: ``model.start``, ``model.logged``)."""

    def __init__(
        self,
        inner: ChatClient,
        plan: CrashPlan,
        before: str = "model.before",
        after: str = "model.returned",
    ) -> None:
        super().__init__(inner)
        self.plan = plan
        self.names = (before, after)

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        turn = 1 + sum(1 for m in messages if m.role == "assistant")
        await self.plan.arrive(self.names[0], turn)
        response = await self.inner.complete(messages, tools, options)
        await self.plan.arrive(self.names[1], turn)
        return response


class CrashingTool(DelegatingTool):
    """Reaches ``tool.before`` and ``tool.returned`` around each call (other names for a
    wrapper outside the durable tool: ``tool.start``, ``tool.logged``)."""

    def __init__(
        self,
        inner: Tool,
        plan: CrashPlan,
        before: str = "tool.before",
        after: str = "tool.returned",
    ) -> None:
        super().__init__(inner)
        self.plan = plan
        self.names = (before, after)

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        await self.plan.arrive(self.names[0], ctx.turn, self.name)
        text = await self.inner.invoke(arguments, ctx)
        await self.plan.arrive(self.names[1], ctx.turn, self.name)
        return text
