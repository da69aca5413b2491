"""How a run ended, and everything it leaves behind.

``Outcome.kind`` says *why* it stopped; ``RunResult.output`` is the answer only when the
kind is ``completed`` and raises otherwise, so a capped or truncated run is never mistaken
for an answer. A run waiting for approval carries a JSON-serialisable :class:`RunState`
that :meth:`tether.Agent.resume` continues, in this process or another.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal

from typing_extensions import TypeVar

from tether.errors import RunNotCompleted, StateError
from tether.messages import (
    Message,
    ResultStatus,
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
    """A call that waits for a human: what it does and what the approver needs to see.

    ``ruling`` is why it waits (the rule that asked, its reason, details such as where each
    argument came from), as a JSON-ready dict.
    """

    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    arguments_hash: str
    context: Any = None
    run_id: str = ""
    ruling: Mapping[str, Any] | None = None

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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (as recorded in the transcript's metadata)."""
        out: dict[str, Any] = {"approved": self.approved}
        if self.reason:
            out["reason"] = self.reason
        return out


STATE_FORMAT = 2


@dataclass(frozen=True, slots=True)
class RunState:
    """Everything needed to continue a run elsewhere. Round-trips through JSON.

    ``version`` numbers a run's states (1 for the first approval round, then 2, ...), so a
    store can let each state be resumed once (:mod:`tether.state_store`). ``memo`` is the
    run's JSON-ready data (``RunContext.memo``); ``turn_metadata`` holds what was decided
    about the calls of the open turn (rulings, human decisions), written to the transcript
    when the turn's results are.
    """

    run_id: str
    transcript: tuple[Message, ...]
    usage: Usage = field(default_factory=Usage)
    turns: int = 0
    consecutive_errors: int = 0
    elapsed_seconds: float = 0.0
    pending: tuple[PendingApproval, ...] = ()
    ready_results: tuple[ToolResult, ...] = ()
    version: int = 1
    memo: Mapping[str, Any] = field(default_factory=dict)
    turn_metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def state_id(self) -> str:
        """``run_id:version``: the identity of this state."""
        return f"{self.run_id}:{self.version}"

    def to_json(self) -> str:
        """The state as JSON text."""
        return json.dumps(self.to_dict(), ensure_ascii=False, default=str)

    def to_dict(self, *, transcript: bool = True) -> dict[str, Any]:
        """A JSON-ready dict (``transcript=False`` leaves the transcript out, for stores
        that keep messages apart)."""
        out: dict[str, Any] = {
            "format": STATE_FORMAT,
            "run_id": self.run_id,
            "version": self.version,
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
                    **({"ruling": dict(p.ruling)} if p.ruling else {}),
                }
                for p in self.pending
            ],
            "ready_results": [part_to_dict(r) for r in self.ready_results],
            "memo": dict(self.memo),
            "turn_metadata": dict(self.turn_metadata),
        }
        if transcript:
            out["transcript"] = [message_to_dict(m) for m in self.transcript]
        return out

    @classmethod
    def from_json(cls, text: str | bytes) -> RunState:
        """Inverse of :meth:`to_json`; raises :class:`StateError` on a document that is not
        a well-formed, consistent run state (see :meth:`check`)."""
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise StateError(f"cannot read run state: not JSON ({exc})") from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Any, transcript: Sequence[Message] | None = None) -> RunState:
        """Inverse of :meth:`to_dict` (``transcript`` given apart when it was left out)."""
        try:
            state = _state_from_dict(data, transcript)
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise StateError(f"cannot read run state: {exc}") from None
        state.check()
        return state

    def check(self) -> None:
        """Raise :class:`StateError` unless this state can be resumed as it stands: a valid
        transcript whose last message holds the open calls; each open call either pending
        (with exactly its arguments and their hash) or answered by a ready result."""
        problems = _state_problems(self)
        if problems:
            raise StateError(f"inconsistent run state {self.run_id!r}: {'; '.join(problems)}")


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a JSON object, not {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a JSON array, not {type(value).__name__}")
    return value


def _state_from_dict(raw: Any, transcript: Sequence[Message] | None) -> RunState:
    data = _object(raw, "a run state")
    fmt = data.get("format", 1 if data.get("version") == 1 else None)
    if fmt not in (1, STATE_FORMAT):
        raise ValueError(f"unsupported state format {fmt!r}")
    run_id = data["run_id"]
    if not isinstance(run_id, str) or not run_id:
        raise ValueError("run_id must be a non-empty string")
    if transcript is None:
        messages = tuple(message_from_dict(m) for m in _list(data["transcript"], "transcript"))
    else:
        messages = tuple(transcript)
    ready = [part_from_dict(r) for r in _list(data.get("ready_results", []), "ready_results")]
    if not all(isinstance(r, ToolResult) for r in ready):
        raise ValueError("ready_results must hold tool results")
    pending = []
    for p in _list(data.get("pending", []), "pending"):
        p = _object(p, "a pending approval")
        ruling = p.get("ruling")
        pending.append(
            PendingApproval(
                call_id=str(p["call_id"]),
                tool=str(p["tool"]),
                arguments=dict(_object(p["arguments"], "pending arguments")),
                arguments_hash=str(p["arguments_hash"]),
                context=p.get("context"),
                run_id=str(p.get("run_id", run_id)),
                ruling=None if ruling is None else dict(_object(ruling, "a ruling")),
            )
        )
    return RunState(
        run_id=run_id,
        transcript=messages,
        usage=usage_from_dict(data.get("usage", {})),
        turns=_count(data.get("turns", 0), "turns"),
        consecutive_errors=_count(data.get("consecutive_errors", 0), "consecutive_errors"),
        elapsed_seconds=_seconds(data.get("elapsed_seconds", 0.0)),
        pending=tuple(pending),
        ready_results=tuple(r for r in ready if isinstance(r, ToolResult)),
        version=_count(data.get("version", 1), "version") if fmt == STATE_FORMAT else 1,
        memo=dict(_object(data.get("memo", {}), "memo")),
        turn_metadata=dict(_object(data.get("turn_metadata", {}), "turn_metadata")),
    )


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer")
    return value


def _seconds(value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (0 <= value < float("inf"))
    ):
        raise ValueError("elapsed_seconds must be a non-negative number")
    return float(value)


def _state_problems(state: RunState) -> list[str]:
    from tether.history import check

    problems = [str(v) for v in check(state.transcript, final=False)]
    if not state.transcript:
        return problems or ["the transcript is empty"]
    if state.version < 1:
        problems.append("version must be at least 1")
    last = state.transcript[-1]
    calls = {c.id: c for c in last.tool_calls} if last.role == "assistant" else {}
    if state.pending and not calls:
        problems.append("calls are pending but the transcript does not end with them")
    seen: set[str] = set()
    for p in state.pending:
        call = calls.get(p.call_id)
        if p.call_id in seen:
            problems.append(f"call {p.call_id!r} is pending twice")
        seen.add(p.call_id)
        if call is None:
            problems.append(f"pending call {p.call_id!r} is not one of the open calls")
            continue
        if p.tool != call.name:
            problems.append(f"pending call {p.call_id!r} names {p.tool!r}, not {call.name!r}")
        expected = arguments_hash(call.arguments)
        if arguments_hash(p.arguments) != expected or p.arguments_hash != expected:
            problems.append(
                f"pending call {p.call_id!r} shows other arguments than the call that would run"
            )
        if p.run_id != state.run_id:
            problems.append(f"pending call {p.call_id!r} belongs to run {p.run_id!r}")
    for r in state.ready_results:
        if r.call_id not in calls:
            problems.append(f"ready result {r.call_id!r} answers none of the open calls")
        elif r.call_id in seen:
            problems.append(f"call {r.call_id!r} is both answered and pending")
        seen.add(r.call_id)
    if state.pending and seen != set(calls):
        missing = sorted(set(calls) - seen)
        problems.append(f"open calls {missing} are neither pending nor answered")
    return problems


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
