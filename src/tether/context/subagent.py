"""A sub-agent: a whole bounded loop exposed as a tool.

It starts each call with an empty history, works in its own context with its own tools and
limits, and returns only its conclusion: thirty files read inside it leave a few lines in
the caller's context. Its usage rolls up into the caller's run. A run that does not
complete (turn cap, budget, truncation, refusal...) comes back to the caller as an error
result that says why, never as an answer. The price: the sub-agent knows nothing of the
caller's conversation, so the task must say everything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.errors import InvalidArguments, ToolFailure
from tether.tools import RunContext, Tool, ToolSpec

if TYPE_CHECKING:
    from tether.loop import Agent
    from tether.outcomes import RunResult

__all__ = ["TASK_DESCRIPTION", "SubAgentTool"]

TASK_DESCRIPTION = (
    "The whole question or task for the sub-agent. It knows nothing of this conversation: "
    "include every name, identifier and constraint it needs, and say what its answer "
    "should contain."
)


class SubAgentTool(Tool):
    """``agent`` as a tool named ``name``: one ``task`` string in, its conclusion out.

    ``suffix`` is appended to every task (for example, a bound on the length of the
    answer). Each call runs ``agent.run`` in a fresh history, in a task of its own so that
    cancelling the caller cancels the sub-agent and still cancels the caller.
    """

    def __init__(
        self, agent: Agent[Any, Any], name: str, description: str, *, suffix: str = ""
    ) -> None:
        self.agent = agent
        self.suffix = suffix
        self.spec = ToolSpec(
            name,
            description,
            {
                "type": "object",
                "properties": {
                    "task": {"type": "string", "minLength": 1, "description": TASK_DESCRIPTION}
                },
                "required": ["task"],
                "additionalProperties": False,
            },
        )

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        task = arguments.get("task")
        extra = sorted(set(arguments) - {"task"})
        problems = [f"unknown field(s) {', '.join(extra)}"] if extra else []
        if not isinstance(task, str) or not task.strip():
            problems.append("task: a non-empty text is required")
        if problems:
            raise InvalidArguments(self.spec.name, problems)
        assert isinstance(task, str)
        prompt = f"{task}\n\n{self.suffix}" if self.suffix else task
        call_id = ctx.call.id if ctx.call is not None else "call"
        run_id = f"{ctx.run_id}/{call_id}" if ctx.run_id else None
        result = await self._run(prompt, run_id, ctx)
        outcome = result.outcome
        if outcome.kind == "completed":
            return result.transcript[-1].text  # with an output type: the object's JSON
        limit = f", limit {outcome.limit}" if outcome.limit else ""
        raise ToolFailure(
            f"The sub-agent {self.spec.name!r} did not finish: {outcome.kind}{limit} "
            f"({outcome.reason}) after {result.turns} turns. Narrow the task or do it "
            "another way."
        )

    async def _run(self, prompt: str, run_id: str | None, ctx: RunContext[Any]) -> RunResult:
        """Run the sub-agent in its own task and report its usage, even when the caller
        is cancelled (then the sub-agent is cancelled too and the caller stays cancelled)."""
        child = self.agent.start(prompt, run_id=run_id)
        try:
            result = await asyncio.shield(child.task)
        except asyncio.CancelledError:
            child.cancel()
            ended: RunResult | BaseException
            (ended,) = await asyncio.gather(child.task, return_exceptions=True)
            if not isinstance(ended, BaseException):
                ctx.report_usage(ended.usage)
            raise
        ctx.report_usage(result.usage)
        return result
