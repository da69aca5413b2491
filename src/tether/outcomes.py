"""How a run ended, and everything it leaves behind.

``Outcome.kind`` says *why* it stopped; ``RunResult.output`` is the answer only when the
kind is ``completed`` and raises otherwise, so a capped or truncated run is never mistaken
for an answer. A run waiting for approval carries a JSON-serialisable :class:`RunState`
that :meth:`tether.Agent.resume` continues, in this process or another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal

from typing_extensions import TypeVar

from tether.errors import RunNotCompleted, StateError
from tether.messages import (
    Message,
    ToolResult,
    Usage,
    message_from_dict,
    message_to_dict,
    part_from_dict,
    part_to_dict,
    usage_from_dict,
    usage_to_dict,
)

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


def arguments_hash(arguments: Mapping[str, Any]) -> str:
    """A stable hash of a call's arguments (canonical JSON, SHA-256)."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A call that waits for a human: what it does and what the approver needs to see."""

    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    arguments_hash: str
    context: Any = None
    run_id: str = ""

    def approve(self) -> Decision:
        """A decision approving exactly this call, with these arguments, in this run."""
        return Decision(self.call_id, self.arguments_hash, True, run_id=self.run_id)

    def deny(self, reason: str = "") -> Decision:
        """A decision refusing this call."""
        return Decision(self.call_id, self.arguments_hash, False, reason, self.run_id)


@dataclass(frozen=True, slots=True)
class Decision:
    """A human's answer, bound to one run, one call id and one arguments hash."""

    call_id: str
    arguments_hash: str
    approved: bool
    reason: str = ""
    run_id: str = ""


@dataclass(frozen=True, slots=True)
class RunState:
    """Everything needed to continue a run elsewhere. Round-trips through JSON."""

    run_id: str
    transcript: tuple[Message, ...]
    usage: Usage = field(default_factory=Usage)
    turns: int = 0
    consecutive_errors: int = 0
    elapsed_seconds: float = 0.0
    pending: tuple[PendingApproval, ...] = ()
    ready_results: tuple[ToolResult, ...] = ()

    def to_json(self) -> str:
        """The state as JSON text."""
        return json.dumps(
            {
                "version": 1,
                "run_id": self.run_id,
                "transcript": [message_to_dict(m) for m in self.transcript],
                "usage": usage_to_dict(self.usage),
                "turns": self.turns,
                "consecutive_errors": self.consecutive_errors,
                "elapsed_seconds": self.elapsed_seconds,
                "pending": [
                    {
                        "call_id": p.call_id,
                        "tool": p.tool,
                        "arguments": dict(p.arguments),
                        "arguments_hash": p.arguments_hash,
                        "context": p.context,
                        "run_id": p.run_id,
                    }
                    for p in self.pending
                ],
                "ready_results": [part_to_dict(r) for r in self.ready_results],
            },
            ensure_ascii=False,
            default=str,
        )

    @classmethod
    def from_json(cls, text: str) -> RunState:
        """Inverse of :meth:`to_json`; raises :class:`StateError` on a bad document."""
        try:
            data = json.loads(text)
            if data.get("version") != 1:
                raise ValueError(f"unsupported state version {data.get('version')!r}")
            ready = [part_from_dict(r) for r in data.get("ready_results", [])]
            if not all(isinstance(r, ToolResult) for r in ready):
                raise ValueError("ready_results must hold tool results")
            return cls(
                run_id=str(data["run_id"]),
                transcript=tuple(message_from_dict(m) for m in data["transcript"]),
                usage=usage_from_dict(data.get("usage", {})),
                turns=int(data.get("turns", 0)),
                consecutive_errors=int(data.get("consecutive_errors", 0)),
                elapsed_seconds=float(data.get("elapsed_seconds", 0.0)),
                pending=tuple(
                    PendingApproval(**{"run_id": str(data["run_id"]), **p})
                    for p in data.get("pending", [])
                ),
                ready_results=tuple(r for r in ready if isinstance(r, ToolResult)),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StateError(f"cannot read run state: {exc}") from exc


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
