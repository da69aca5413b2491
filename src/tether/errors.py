"""The one exception tree of tether.

Foreign exceptions (SDKs, transports) are translated at the seam with ``raise X from exc``
and never escape a provider adapter. Two subclasses live beside the code that raises them
and are drawn here so the whole tree is in one place.

::

    TetherError
    ├── ConfigError              bad configuration: missing key, unknown model, bad limits
    │   └── SandboxUnavailable       no isolation here (tether.guards.sandbox)
    ├── MCPToolError             an MCP server could not be reached or answered badly
    │                                (tether.mcp; shown to the model as a generic failure)
    ├── ProviderError            the model provider failed; ``kind`` says how
    │   └── ContextWindowExceeded    the request does not fit in the model's window
    ├── ToolDefinitionError      a function cannot become a tool
    ├── ToolFailure              raised by a tool: its message is shown to the model as is
    │   └── InvalidArguments         the model's arguments failed validation (names fields)
    ├── InvalidHistoryError      a history that no provider would accept (a bug, never sent)
    ├── RunNotCompleted          ``RunResult.output`` read on a run that did not complete
    ├── StateError               a run state or an approval decision that cannot be applied
    │   └── StateClaimed             the state is resumed elsewhere, or was (tether.state_store)
    ├── StructuredOutputError    no valid object: invalid after the re-ask, refused, truncated
    │                                or context overflow (``kind`` says which)
    ├── WorkflowNotCompleted     ``WorkflowResult.output`` read on a workflow that did not complete
    └── ReplayDivergence         a replayed run differs from its cassette (names turn and call)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tether.history import Violation
    from tether.messages import Message, Usage
    from tether.outcomes import RunResult

ProviderErrorKind = Literal[
    "rate_limit",
    "overloaded",
    "server",
    "timeout",
    "connection",
    "authentication",
    "permission",
    "bad_request",
    "not_found",
    "context_exceeded",
    "other",
]

RETRYABLE_KINDS: frozenset[str] = frozenset(
    {"rate_limit", "overloaded", "server", "timeout", "connection"}
)


class TetherError(Exception):
    """Base class of every error raised by tether."""


class ConfigError(TetherError):
    """The configuration cannot work: say what is wrong and what to set."""


class ProviderError(TetherError):
    """A model provider failed after its own retries.

    ``kind`` classifies the failure, ``status`` is the HTTP status when there was one,
    ``usage`` what a reply the adapter rejected had cost (it still counts toward limits).
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ProviderErrorKind = "other",
        status: int | None = None,
        usage: Usage | None = None,
    ) -> None:
        super().__init__(message)
        self.kind: ProviderErrorKind = kind
        self.status = status
        self.usage = usage

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later (rate limit, overload, 5xx, network)."""
        return self.kind in RETRYABLE_KINDS


class ContextWindowExceeded(ProviderError):
    """The request is larger than the model's context window."""

    def __init__(self, message: str = "the request exceeds the model's context window") -> None:
        super().__init__(message, kind="context_exceeded", status=400)


class ToolDefinitionError(TetherError):
    """A function cannot be turned into a tool (bad signature, bad name)."""


class ToolFailure(TetherError):
    """Raise from a tool to tell the model what went wrong; the message is always shown.

    Any other exception is reported to the model as a generic failure, because its text
    can hold paths, SQL or secrets (unless detailed errors are enabled).
    """


class InvalidArguments(ToolFailure):
    """The arguments of a call do not match the tool's schema."""

    def __init__(self, tool: str, problems: list[str]) -> None:
        self.tool = tool
        self.problems = problems
        super().__init__(
            f"invalid arguments for tool {tool!r}: "
            + "; ".join(problems)
            + ". Fix these fields and call again."
        )


class InvalidHistoryError(TetherError):
    """A history breaks the pairing/order rules every provider enforces.

    Raised before a request is sent: it is a bug in the code that built the history.
    """

    def __init__(self, violations: list[Violation]) -> None:
        self.violations = violations
        lines = "; ".join(str(v) for v in violations[:5])
        more = f" (+{len(violations) - 5} more)" if len(violations) > 5 else ""
        super().__init__(f"invalid history: {lines}{more}")


class RunNotCompleted(TetherError):
    """The run ended without a final answer; ``result`` holds the outcome and transcript."""

    def __init__(self, result: RunResult) -> None:
        self.result = result
        outcome = result.outcome
        super().__init__(
            f"the run did not complete: {outcome.kind} ({outcome.reason}); "
            "read result.outcome and result.transcript instead of result.output"
        )


class StateError(TetherError):
    """A saved run state or an approval decision cannot be applied to this run."""


class StateClaimed(StateError):
    """The state is being resumed by someone else, or already was: load the latest one."""


OutputFailureKind = Literal["invalid", "refused", "truncated", "context_exceeded"]


class StructuredOutputError(TetherError):
    """No valid object came back; nothing half-parsed is ever returned.

    ``kind`` is ``invalid`` (not JSON or not valid against the type, after the re-ask),
    ``refused``, ``truncated`` or ``context_exceeded``. ``problems`` lists what failed
    validation, ``text`` is the last reply as sent, ``usage`` counts every request made and
    ``transcript`` holds the messages exchanged, re-ask included.
    """

    def __init__(
        self,
        kind: OutputFailureKind,
        message: str,
        *,
        problems: tuple[str, ...] = (),
        text: str = "",
        usage: Usage | None = None,
        attempts: int = 1,
        transcript: tuple[Message, ...] = (),
    ) -> None:
        super().__init__(message)
        self.kind: OutputFailureKind = kind
        self.problems = problems
        self.text = text
        self.usage = usage
        self.attempts = attempts
        self.transcript = transcript


class WorkflowNotCompleted(TetherError):
    """A workflow ended without its result; ``result`` holds the outcome and the steps."""

    def __init__(self, result: object, kind: str, reason: str) -> None:
        self.result = result
        super().__init__(
            f"the workflow did not complete: {kind} ({reason}); "
            "read result.outcome and result.steps instead of result.output"
        )


class ReplayDivergence(TetherError):
    """A replayed run did something its cassette did not record.

    ``turn`` is the model request (or workflow step) where it happened, ``call`` the tool
    call id when one is involved, ``diff`` a readable unified diff (recorded, then now).
    """

    def __init__(self, where: str, diff: str, *, turn: int = 0, call: str | None = None) -> None:
        self.where = where
        self.diff = diff
        self.turn = turn
        self.call = call
        super().__init__(f"the replay diverged from the cassette at {where}\n{diff}".rstrip())
