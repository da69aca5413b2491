"""One ruling per tool call, before it runs: ``allow``, ``ask`` (a human decides) or ``deny``.

A ruling comes from the tool itself (:meth:`tether.tools.Tool.ruling`: its declaration and
its wrappers, such as an argument policy) and from the agent's optional
:class:`CallPolicy` (provenance, scope); the strictest wins. It is computed once; ``deny`` is
final and never shown to an approver; ``ask`` defers the call to a human, whose decision is
final too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tether.messages import Message, ToolCall, ToolResult
    from tether.tools import RunContext, Tool

Action = Literal["allow", "ask", "deny"]
_RANK = {"allow": 0, "ask": 1, "deny": 2}
_EMPTY: Mapping[str, Any] = {}


@dataclass(frozen=True, slots=True)
class Ruling:
    """What happens to one call: ``action``, why (one sentence), which rule said so, and
    JSON-ready ``details`` for the approver (for instance where each argument came from)."""

    action: Action
    reason: str = ""
    rule: str = ""
    details: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)

    @property
    def plain(self) -> bool:
        """An allow with nothing to say (not recorded in the transcript)."""
        return self.action == "allow" and not self.reason and not self.details

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        out: dict[str, Any] = {"action": self.action}
        if self.reason:
            out["reason"] = self.reason
        if self.rule:
            out["rule"] = self.rule
        if self.details:
            out["details"] = dict(self.details)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Ruling:
        """Inverse of :meth:`to_dict`; raises ``ValueError`` on a bad document."""
        if not isinstance(data, Mapping) or data.get("action") not in _RANK:
            raise ValueError(f"not a ruling: {data!r}"[:200])
        details = data.get("details") or {}
        if not isinstance(details, Mapping):
            raise ValueError("a ruling's details must be an object")
        return cls(data["action"], str(data.get("reason", "")), str(data.get("rule", "")), details)


ALLOW = Ruling("allow")


def strictest(*rulings: Ruling) -> Ruling:
    """The strictest of ``rulings`` (deny > ask > allow); the first of equals wins."""
    best = ALLOW
    for r in rulings:
        if _RANK[r.action] > _RANK[best.action] or (r.action == best.action and best.plain):
            best = r
    return best


@runtime_checkable
class CallPolicy(Protocol):
    """A run-wide guard consulted for every call of a run (``Agent(policy=...)``).

    Its per-run data lives in ``ctx.memo`` (JSON-ready), which travels in the run state, so
    a run resumed in another process needs no rebuild.
    """

    def begin(self, messages: Sequence[Message], ctx: RunContext[Any]) -> None:
        """A new run starts with ``messages`` (not called on resume)."""

    async def rule(self, tool: Tool, call: ToolCall, ctx: RunContext[Any]) -> Ruling:
        """The ruling for ``call`` before it runs."""
        ...

    def record(self, tool: Tool, call: ToolCall, result: ToolResult, ctx: RunContext[Any]) -> None:
        """A call ran (status ``ok`` or ``error``) and returned ``result``."""
