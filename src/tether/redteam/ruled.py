"""A call policy applied around a tool: the ruling before the call, the record after.

:class:`Ruled` lets a ``CallPolicy`` (``rule`` / ``record``) guard a tool in any loop: a
``deny`` refuses the call, an ``ask`` asks the approver inside the call (no answer or a
refusal refuses it), and what the tool returns is recorded for the run's provenance. The
run's memo is shared by all the wrapped tools of one run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.errors import ToolFailure
from tether.guards.approval import ApprovalRequest, Approver, ask, refusal
from tether.guards.callpolicy import ProvenancePolicy
from tether.messages import ToolCall, ToolResult
from tether.tools import DelegatingTool, RunContext, Tool

__all__ = ["Ruled"]


class Ruled(DelegatingTool):
    """``inner`` guarded by ``policy``; ``memo`` is the run's shared memo."""

    def __init__(
        self,
        inner: Tool,
        policy: ProvenancePolicy,
        memo: dict[str, Any],
        approver: Approver,
        timeout: float | None = None,
    ) -> None:
        super().__init__(inner)
        self.policy = policy
        self.memo = memo
        self.approver = approver
        self.timeout = timeout

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        ctx.memo = self.memo
        call = ctx.call if ctx.call is not None else ToolCall("", self.name, dict(arguments))
        ruling = await self.policy.rule(self.inner, call, ctx)
        if ruling.action == "deny":
            raise ToolFailure(f"Blocked: {ruling.reason}.")
        if ruling.action == "ask":
            context = {"reason": ruling.reason, "rule": ruling.rule, **ruling.details}
            request = ApprovalRequest(self.name, dict(arguments), context, call.id, ctx.run_id)
            verdict = await ask(self.approver, request, self.timeout)
            if not verdict.approved:
                raise ToolFailure(refusal(verdict.reason))
        try:
            text = await self.inner.invoke(arguments, ctx)
        except Exception:
            self.policy.record(self.inner, call, ToolResult(call.id, "", True), ctx)
            raise
        self.policy.record(self.inner, call, ToolResult(call.id, text), ctx)
        return text
