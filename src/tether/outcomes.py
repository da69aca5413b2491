"""How a run ended, and everything it leaves behind.

``Outcome.kind`` says *why* it stopped; ``RunResult.output`` is the answer only when the
kind is ``completed`` and raises otherwise, so a capped or truncated run is never mistaken
for an answer. A run waiting for approval carries a sealed :class:`~tether.run_state.RunState`
that :meth:`tether.Agent.resume` continues, in this process or another.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal

from typing_extensions import TypeVar

from tether.errors import RunNotCompleted
from tether.messages import Message, ResultStatus, ToolResult, Usage
from tether.run_state import (  # the run state's own module; re-exported here
    STATE_FORMAT,
    Decision,
    PendingApproval,
    RunState,
    arguments_hash,
)

__all__ = [
    "NO_VALUE",
    "STATE_FORMAT",
    "Decision",
    "Outcome",
    "OutcomeKind",
    "OutputT",
    "PendingApproval",
    "RunResult",
    "RunState",
    "arguments_hash",
]

OutputT = TypeVar("OutputT", default=Any)
"""The type of ``RunResult.output`` (``Agent`` makes it ``str`` unless given an output type)."""
NO_VALUE: Any = object()
"""``RunResult.value`` of a run without a validated output (the answer is the text)."""

OutcomeKind = Literal[
    "completed",
    "turn_cap",
    "budget_exceeded",
    "truncated",
    "refused",
    "context_exceeded",
    "cancelled",
    "failed",
    "awaiting_approval",
]


@dataclass(frozen=True, slots=True)
class Outcome:
    """Why a run ended. ``limit`` names the exhausted bound for ``budget_exceeded``
    and ``turn_cap``; ``error`` classifies a ``failed`` run."""

    kind: OutcomeKind
    reason: str
    limit: str | None = None
    error: str | None = None

    @property
    def completed(self) -> bool:
        """True only for a final answer."""
        return self.kind == "completed"


@dataclass(frozen=True, slots=True)
class RunResult(Generic[OutputT]):
    """The end of a run: outcome, full transcript, summed usage."""

    outcome: Outcome
    transcript: tuple[Message, ...]
    usage: Usage
    turns: int
    run_id: str = ""
    state: RunState | None = None
    """Set when the run can be resumed (``awaiting_approval``)."""
    value: Any = NO_VALUE
    """The validated final answer of an agent with an ``output_type``."""

    @property
    def output(self) -> OutputT:
        """The final answer (the validated object with an ``output_type``, else the text);
        raises :class:`RunNotCompleted` unless the run completed."""
        if self.outcome.kind != "completed":
            raise RunNotCompleted(self)
        if self.value is not NO_VALUE:
            return self.value  # type: ignore[no-any-return]
        return self.transcript[-1].text  # type: ignore[return-value]

    @property
    def pending(self) -> tuple[PendingApproval, ...]:
        """Calls waiting for a decision (only for ``awaiting_approval``)."""
        return self.state.pending if self.state else ()

    def results(self, *statuses: ResultStatus) -> list[ToolResult]:
        """The transcript's tool results with one of ``statuses`` (all when none given),
        e.g. ``result.results("denied", "blocked")``."""
        return [
            r
            for m in self.transcript
            for r in m.tool_results
            if not statuses or r.status in statuses
        ]
