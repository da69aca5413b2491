"""Crash injection for durable runs: kill the worker at a chosen step boundary, once.

A :class:`CrashPlan` names, for each workflow id, one boundary where its run is cut. The
wrappers reach the boundaries: :class:`CrashingClient` around each model request,
:class:`CrashingTool` around each tool call. Wrapped inside the durable step (around the
agent's own client and tools), they reach ``model.before`` / ``model.returned`` and
``tool.before`` / ``tool.returned``: before the work, and after it but before DBOS logs
it (``tool.returned`` is the worst case for an irreversible tool: its effect is done, the
log does not know it). Wrapped outside the step (around the durable agent's client and
tools, with other names: ``model.start`` / ``model.logged``, ``tool.start`` /
``tool.logged``), they reach the points before a step starts and after it is logged.

A point is written ``BOUNDARY``, ``BOUNDARY:TURN`` or ``BOUNDARY:TURN:TOOL``. Each point
fires once across restarts (a marker file is written first), so the restarted worker
replays past it. The plan comes from the environment variable ``TETHER_CRASH_PLAN``
(JSON ``{"marks": DIR, "points": {WORKFLOW_ID: POINT}, "park": BOOL}``).

Without ``park`` the worker SIGKILLs itself at the point. With ``park`` the run stops
there (it waits forever) and the test kills the worker once every run has reached its
point: one SIGKILL cuts every run at its own boundary. A run stopped inside a database
transaction holds its locks (all of SQLite's): start it once the others have stopped.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dbos import DBOS

from tether.clients import ChatClient, ChatOptions, ChatResponse, DelegatingChatClient
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
