"""A small typed event stream of a run, for the CLI, the web console and tracing.

Listeners are plain callables; when there are none the loop builds no event at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from tether.clients import ChatResponse, TextDelta
from tether.messages import Message, ToolCall, ToolResult

if TYPE_CHECKING:
    from tether.outcomes import Outcome
    from tether.rulings import Ruling


@dataclass(frozen=True, slots=True)
class RunStarted:
    """A run (or a resumed run) begins."""

    run_id: str


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """A request is about to be sent."""

    turn: int
    messages: int


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """A response arrived."""

    turn: int
    response: ChatResponse


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """A tool call begins."""

    turn: int
    call: ToolCall


@dataclass(frozen=True, slots=True)
class CallRuled:
    """A call got a ruling other than a plain allow (asked, denied, or allowed with a
    reason), before anything ran."""

    turn: int
    call: ToolCall
    ruling: Ruling


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    """A call got its result: ``result.status`` says whether it was executed (``ok``),
    failed (``error``), denied by a human, blocked by a policy, or stopped with its run.
    Calls refused before running (blocked, denied) have no :class:`ToolCallStarted`.
    """

    turn: int
    call: ToolCall
    result: ToolResult
    seconds: float


@dataclass(frozen=True, slots=True)
class MessageAppended:
    """A message joined the transcript."""

    message: Message


@dataclass(frozen=True, slots=True)
class RunFinished:
    """The run ended with this outcome."""

    outcome: Outcome


Event: TypeAlias = (
    RunStarted
    | ModelRequest
    | ModelResponse
    | TextDelta
    | CallRuled
    | ToolCallStarted
    | ToolCallFinished
    | MessageAppended
    | RunFinished
)
Listener: TypeAlias = Callable[[Event], None]
