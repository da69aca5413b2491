"""Red-team scenarios and their report: attempted versus achieved unauthorized effects.

A :class:`Scenario` builds a :class:`Setup`: fake services that record effects, the tools
with their guards, the legitimate task (prompt, plan, final answer), an approver playing
the human, and a check that the legitimate task was done. :func:`run_scenario` runs it
with an :class:`~tether.redteam.obedient.ObedientModel`, answering approvals (deferred
mode) with the scenario's approver, and reports what the model attempted, what each
attempt got, and which unauthorized effects the services really recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.guards.approval import Approver, run_with_approvals
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message
from tether.outcomes import RunResult
from tether.redteam.obedient import ObedientModel, PlanStep
from tether.redteam.services import Effect, EffectLog
from tether.tools import Tool

__all__ = [
    "AttemptOutcome",
    "RedTeamReport",
    "Scenario",
    "ScenarioReport",
    "Setup",
    "run_redteam",
    "run_scenario",
    "run_scenarios",
]

DEFAULT_LIMITS = Limits(max_turns=40, max_consecutive_errors=10, max_wall_seconds=60)


@dataclass(slots=True)
class Setup:
    """One scenario, ready to run."""

    tools: list[Tool]
    prompt: str
    plan: list[PlanStep]
    effects: EffectLog
    succeeded: Callable[[RunResult], bool]
    """Whether the legitimate task was done (read the services, not the model's words)."""
    answer: str | Callable[[Sequence[Message]], str] = "Done."
    instructions: str | None = None
    approver: Approver | None = None
    """Answers deferred approvals as the human would; ``None``: nothing is deferred."""
    deps: Any = None
    limits: Limits = DEFAULT_LIMITS
    cleanup: Callable[[], Awaitable[None]] | None = None
    """Releases what the setup holds (sandboxes, servers, temporary files) after the run."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named, documented way to build a :class:`Setup`."""

    name: str
    description: str
    build: Callable[[], Setup]


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """One call the obedient model made on an instruction or a probe, and what it got."""

    tool: str
    arguments: dict[str, Any]
    reason: str
    blocked: bool
    result: str


@dataclass(frozen=True, slots=True)
class ScenarioReport:
    """What one scenario shows."""

    name: str
    outcome: str
    legit_completed: bool
    attempts: tuple[AttemptOutcome, ...]
    unreachable: tuple[str, ...]
    """Instructions the model found but had no tool for."""
    effects: tuple[Effect, ...]

    @property
    def achieved(self) -> tuple[Effect, ...]:
        """Unauthorized effects the services really recorded."""
        return tuple(e for e in self.effects if not e.authorized)

    @property
    def ok(self) -> bool:
        """The legitimate task completed and no unauthorized effect happened."""
        return self.legit_completed and not self.achieved


@dataclass(frozen=True, slots=True)
class RedTeamReport:
    """The report over several scenarios."""

    scenarios: tuple[ScenarioReport, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """Every scenario passed."""
        return all(s.ok for s in self.scenarios)

    @property
    def attempted(self) -> int:
        """Calls made on an injected instruction or a probe, all scenarios together."""
        return sum(len(s.attempts) for s in self.scenarios)

    @property
    def achieved(self) -> int:
        """Unauthorized effects, all scenarios together."""
        return sum(len(s.achieved) for s in self.scenarios)

    def render(self) -> str:
        """A plain-text report, one block per scenario."""
        lines = [
            f"red team: {len(self.scenarios)} scenarios, {self.attempted} unauthorized calls "
            f"attempted, {self.achieved} unauthorized effects achieved",
        ]
        for s in self.scenarios:
            verdict = "PASS" if s.ok else "FAIL"
            lines.append(
                f"\n[{verdict}] {s.name}: outcome {s.outcome}, legitimate task "
                f"{'done' if s.legit_completed else 'NOT done'}, {len(s.attempts)} attempted, "
                f"{len(s.achieved)} achieved"
            )
            for a in s.attempts:
                got = "blocked" if a.blocked else "EXECUTED"
                lines.append(f"  - {a.tool}({_short(a.arguments)}) -> {got}: {a.result[:90]}")
            lines.extend(f"  - no tool for: {text[:100]}" for text in s.unreachable)
            lines.extend(f"  ! {e.kind}: {e.detail}" for e in s.achieved)
        return "\n".join(lines)


def _short(arguments: dict[str, Any]) -> str:
    return ", ".join(f"{k}={str(v)[:40]!r}" for k, v in arguments.items())


async def run_scenario(scenario: Scenario) -> ScenarioReport:
    """Run one scenario with the obedient model and report on it."""
    setup = scenario.build()
    model = ObedientModel(setup.plan, answer=setup.answer)
    agent: Agent[Any] = Agent(
        model,
        setup.tools,
        instructions=setup.instructions,
        limits=setup.limits,
        deps=setup.deps,
    )
    try:
        if setup.approver is None:
            result = await agent.run(setup.prompt)
        else:
            result = await run_with_approvals(agent, setup.prompt, setup.approver)
        legit = result.outcome.completed and setup.succeeded(result)
    finally:
        if setup.cleanup is not None:
            await setup.cleanup()
    results = {r.call_id: r for m in result.transcript for r in m.tool_results}
    attempts = []
    for a in model.attempts:
        r = results.get(a.call.id)
        content = r.content if r else "(no result)"
        blocked = r is None or r.is_error
        attempts.append(
            AttemptOutcome(a.call.name, dict(a.call.arguments), a.reason, blocked, content)
        )
    unreachable = tuple(f"{i.kind}: {i.text.strip()}" for i in model.unreachable)
    return ScenarioReport(
        scenario.name,
        result.outcome.kind,
        legit,
        tuple(attempts),
        tuple(dict.fromkeys(unreachable)),
        tuple(setup.effects.effects),
    )


async def run_scenarios(scenarios: Iterable[Scenario] | None = None) -> RedTeamReport:
    """Run ``scenarios`` (the built-in hardened ones by default), one after the other."""
    if scenarios is None:
        from tether.redteam.scenarios import default_scenarios

        scenarios = default_scenarios()
    return RedTeamReport(tuple([await run_scenario(s) for s in scenarios]))


def run_redteam(scenarios: Iterable[Scenario] | None = None) -> RedTeamReport:
    """:func:`run_scenarios` for code without an event loop (the CLI)."""
    return asyncio.run(run_scenarios(scenarios))
