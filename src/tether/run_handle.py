"""A run started in a task of its own (:meth:`tether.Agent.start`)."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from tether.outcomes import Outcome, RunResult

if TYPE_CHECKING:
    from tether.loop import _Run

__all__ = ["RunHandle"]


class RunHandle:
    """A run started with :meth:`Agent.start`. ``await handle`` gives its
    :class:`RunResult`; :meth:`cancel` stops it and that result is then ``cancelled``, with
    the transcript closed truthfully. Cancelling the awaiting task still raises there."""

    __slots__ = ("_run", "task")

    def __init__(self, run: _Run, task: asyncio.Future[RunResult]) -> None:
        self._run = run
        self.task = task

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._run.run_id

    def cancel(self) -> bool:
        """Ask the run to stop; ``False`` if it has already ended."""
        if self.task.done():
            return False
        self._run.stop_requested = True
        return self.task.cancel()

    def done(self) -> bool:
        """Whether the run has ended."""
        return self.task.done()

    def __await__(self) -> Generator[Any, None, RunResult]:
        return self._result().__await__()

    async def _result(self) -> RunResult:
        try:
            return await self.task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            outside = current is not None and current.cancelling() > 0
            if not self._run.stop_requested or not self.task.cancelled() or outside:
                raise
            run = self._run  # stopped before the loop began: nothing ran
            outcome = Outcome("cancelled", "the run was cancelled before it started")
            return RunResult(outcome, tuple(run.history), run.usage, run.turns, run.run_id)
