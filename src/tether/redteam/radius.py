"""The red team checks the blast radius: what a run did must fit what the report said.

:func:`judge` holds the calls a run really executed against a
:class:`~tether.blast.BlastRadius`: a tool the report says is ``never`` reachable, an
approval-gated call that ran without an approval, a destination value from a source the
report closes, a constant bound or an application value passed, more calls than a
calls-per-run bound, or a credential value sent out where the report says it never goes
is a :class:`Breach`. Tools the report marks ``unknown`` are counted, not judged (the
report made no promise about them), except that an approval they declare still holds.

:func:`check_scenarios` and :func:`check_suite` run every built-in scenario and every case
of the suite under the obedient models, once with every approval denied and once with
every approval granted, and judge each run against the report of its own setup.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.blast import BlastRadius, Surface, blast_radius, chain
from tether.blast.report import weakest
from tether.guards.approval import ApprovalRequest, InlineApproval, run_with_approvals
from tether.guards.callpolicy import ProvenancePolicy
from tether.guards.normalize import strings_in
from tether.guards.provenance import TaintPolicy
from tether.loop import Agent
from tether.outcomes import RunResult
from tether.tools import Tool

__all__ = [
    "Breach",
    "CrossCheck",
    "Executed",
    "Values",
    "check_radius",
    "check_scenarios",
    "check_suite",
    "executed_calls",
    "judge",
]

Mode = Literal["denied", "granted"]
MODES: tuple[Mode, ...] = ("denied", "granted")


@dataclass(frozen=True, slots=True)
class Executed:
    """One call that ran, and whether a human approved it."""

    tool: str
    arguments: Mapping[str, Any]
    approved: bool = False


@dataclass(frozen=True, slots=True)
class Values:
    """Where values came from in a run: what the user wrote, what the application
    vouched for, the registry's hook, and application values at the run's start."""

    user: str = ""
    application: frozenset[str] = frozenset()
    known: Callable[[str], bool] | None = None
    app_values: Mapping[str, float] = field(default_factory=dict)
    """Bounds read from the application (``"what remains paid ..."`` -> a number)."""
    secrets: frozenset[str] = frozenset()
    """Values credential tools returned in the run."""

    def source(self, value: str) -> str:
        """``user``, ``application``, ``registry`` or ``any``."""
        v = value.strip().lower()
        if len(v) >= 3 and v in self.user.lower():
            return "user"
        if v in {a.strip().lower() for a in self.application}:
            return "application"
        if self.known is not None and self.known(value):
            return "registry"
        return "any"


@dataclass(frozen=True, slots=True)
class Breach:
    """A run did what its report said it could not."""

    run: str
    tool: str
    arguments: Mapping[str, Any]
    why: str

    def __str__(self) -> str:
        args = json.dumps(dict(self.arguments), ensure_ascii=False, default=str)[:120]
        return f"{self.run}: {self.tool}({args}): {self.why}"


def judge(
    report: BlastRadius, calls: Sequence[Executed], values: Values, run: str = ""
) -> list[Breach]:
    """Every way ``calls`` went past ``report`` (see the module doc)."""
    out: list[Breach] = []
    names = {t.name: t for t in report.tools}
    counts: dict[str, int] = {}
    spent: dict[str, float] = {}
    for c in calls:
        t = names.get(c.tool)

        def breach(why: str, c: Executed = c) -> None:
            out.append(Breach(run, c.tool, c.arguments, why))

        if t is None:
            breach("ran a tool the report does not list")
            continue
        counts[c.tool] = counts.get(c.tool, 0) + 1
        if t.tier == "never":
            breach("the report says this tool is never reachable")
        if t.approval is not None and t.tier in ("approval", "unknown") and not c.approved:
            breach("ran without the approval the report says it needs")
        if t.calls_per_run is not None and counts[c.tool] > t.calls_per_run:
            breach(f"call {counts[c.tool]} in a run; the report says at most {t.calls_per_run}")
        for b in t.bounds:
            value = c.arguments.get(b.argument)
            if not isinstance(value, int | float):
                continue
            limit = (
                b.limit if b.limit is not None else values.app_values.get(b.application_value or "")
            )
            if limit is not None and value > limit + 1e-9:
                breach(f"{b.argument} {value:g} passes the bound {b.text} ({limit:g})")
            if b.above is not None and not value > b.above:
                breach(f"{b.argument} {value:g} is not above {b.above:g}")
            if b.application_value is not None and t.money_per_run == b.application_value:
                spent[b.application_value] = spent.get(b.application_value, 0.0) + value
                cap = values.app_values.get(b.application_value)
                if cap is not None and spent[b.application_value] > cap + 1e-9:
                    breach(f"the run's total {spent[b.application_value]:g} passes {cap:g}")
        for d in (*report.destinations, *report.objects):
            if d.tool != c.tool or d.argument not in c.arguments:
                continue
            for text in strings_in(c.arguments[d.argument]):
                source = values.source(text)
                tier = d.tiers.get(source, d.tiers.get("any", "unknown"))
                if source == "any" and "system" in d.tiers:  # a record's value: cannot tell
                    tier = weakest(tier, d.tiers["system"])
                if tier == "never":
                    breach(f"{d.argument} {text!r} comes from {source}: the report says never")
                elif tier == "approval" and not c.approved:
                    breach(f"{d.argument} {text!r} from {source} ran without an approval")
        closed = {f.sink for f in report.flows if f.kind == "credential" and f.tier == "never"}
        for arg, value in c.arguments.items():
            if f"{c.tool}.{arg}" not in closed:
                continue
            text = " ".join(strings_in(value))
            leaked = [s for s in values.secrets if s in text]
            if leaked:
                breach(f"{arg} carries a credential value; the report says it never goes out")
    return out


def executed_calls(result: RunResult, approved: Iterable[str]) -> list[Executed]:
    """The calls of a run whose result is ``ok``, with whether ``approved`` (call ids a
    human approved) holds their id."""
    granted = set(approved)
    calls = {c.id: c for m in result.transcript for c in m.tool_calls}
    return [
        Executed(calls[r.call_id].name, dict(calls[r.call_id].arguments), r.call_id in granted)
        for m in result.transcript
        for r in m.tool_results
        if r.status == "ok" and r.call_id in calls
    ]


def _secrets(result: RunResult, tools: Mapping[str, Tool]) -> frozenset[str]:
    """Distinctive values (6+ characters) that credential tools returned in the run."""
    calls = {c.id: c.name for m in result.transcript for c in m.tool_calls}
    found: set[str] = set()
    for m in result.transcript:
        for r in m.tool_results:
            tool = tools.get(calls.get(r.call_id, ""))
            if tool is None or tool.effect != "credential" or r.is_error:
                continue
            try:
                doc = json.loads(r.content)
            except ValueError:
                doc = r.content
            found.update(s for s in strings_in(doc) if len(s.strip()) >= 6)
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class CrossCheck:
    """Every run judged: how many, how many calls, and the breaches."""

    runs: int
    calls: int
    unjudged: int
    """Calls of tools the report marks ``unknown`` (counted, not judged)."""
    breaches: tuple[Breach, ...]

    @property
    def ok(self) -> bool:
        """No run did what its report said it could not."""
        return self.runs > 0 and not self.breaches

    def render(self) -> str:
        """One line, then one line per breach."""
        head = (
            f"blast radius cross-check: {self.runs} runs, {self.calls} executed calls, "
            f"{self.unjudged} on tools the report cannot see, {len(self.breaches)} breaches"
        )
        return "\n".join([head, *(f"  ! {b}" for b in self.breaches)])


def _approver(mode: Mode, granted: set[str]) -> Callable[[ApprovalRequest], bool]:
    def approve(request: ApprovalRequest) -> bool:
        if mode == "granted":
            granted.add(request.call_id)
        return mode == "granted"

    return approve


def _sum(checks: Iterable[tuple[list[Executed], BlastRadius, list[Breach]]]) -> CrossCheck:
    runs = calls = unjudged = 0
    breaches: list[Breach] = []
    for executed, report, found in checks:
        runs += 1
        calls += len(executed)
        unknown = {t.name for t in report.tools if t.tier == "unknown"}
        unjudged += sum(c.tool in unknown for c in executed)
        breaches.extend(found)
    return CrossCheck(runs, calls, unjudged, tuple(breaches))


async def check_scenarios(scenarios: Iterable[Any] | None = None) -> CrossCheck:
    """Run each scenario (the built-in ones by default) with approvals denied, then all
    granted, and judge each run against its setup's report."""
    from tether.redteam.harness import Scenario, Setup
    from tether.redteam.obedient import ObedientModel
    from tether.redteam.scenarios import default_scenarios

    chosen: list[Scenario] = list(default_scenarios() if scenarios is None else scenarios)
    done = []
    for scenario in chosen:
        for mode in MODES:
            setup: Setup = scenario.build()
            granted: set[str] = set()
            approve = _approver(mode, granted)
            for t in setup.tools:
                for w in chain(t):
                    if isinstance(w, InlineApproval | TaintPolicy) and w.approver is not None:
                        w.approver = approve  # the scenario's human, replaced
            report = blast_radius(Surface(scenario.name, setup.tools, setup.limits))
            model = ObedientModel(setup.plan, answer=setup.answer)
            agent: Agent[Any] = Agent(
                model,
                setup.tools,
                instructions=setup.instructions,
                limits=setup.limits,
                deps=setup.deps,
            )
            try:
                result = await run_with_approvals(agent, setup.prompt, approve)
            finally:
                if setup.cleanup is not None:
                    await setup.cleanup()
            executed = executed_calls(result, granted)
            values = Values(user=setup.prompt, secrets=_secrets(result, agent.tools))
            found = judge(report, executed, values, f"{scenario.name} ({mode})")
            done.append((executed, report, found))
    return _sum(done)


async def check_suite(domains: Sequence[Any] | None = None) -> CrossCheck:
    """Run every case of the suite (all four domains by default) under the default call
    policy, injected, with approvals denied and then all granted, and judge the side
    effects each world really recorded against the report of its tools and policy."""
    from tether.redteam.domains import DOMAINS

    chosen = DOMAINS if domains is None else domains
    return _sum([await _suite_run(d, c, m) for d in chosen for c in d.cases for m in MODES])


async def _suite_run(
    domain: Any, case: Any, mode: Mode
) -> tuple[list[Executed], BlastRadius, list[Breach]]:
    from tether.redteam.hijacked import HijackedModel, call_key
    from tether.redteam.suite import LIMITS
    from tether.redteam.world import World

    world: World = domain.build({**domain.slots, case.slot: case.injection})

    def known(value: str, ctx: Any) -> bool:
        return world.known(value)

    def application(ctx: Any) -> tuple[str, ...]:
        return world.application

    policy = ProvenancePolicy(known, application, scoped=domain.scoped)
    report = blast_radius(Surface(domain.name, world.tools, LIMITS, policy))
    granted: set[str] = set()
    requests: list[ApprovalRequest] = []
    approve = _approver(mode, granted)

    def record(request: ApprovalRequest) -> bool:
        requests.append(request)
        return approve(request)

    model = HijackedModel(case.plan, injection=case.injection, attack=case.attack)
    agent: Agent[Any] = Agent(model, world.tools, limits=LIMITS, policy=policy)
    result = await run_with_approvals(agent, case.task, record)
    yes = {call_key(r.tool, r.arguments) for r in requests if r.call_id in granted}
    executed = [
        Executed(a.tool, a.arguments, call_key(a.tool, a.arguments) in yes) for a in world.done
    ]
    values = Values(
        user=case.task,
        application=frozenset(world.application),
        known=world.known,
        secrets=_secrets(result, agent.tools),
    )
    return executed, report, judge(report, executed, values, f"{case.name} ({mode})")


async def check_radius() -> CrossCheck:
    """:func:`check_scenarios` and :func:`check_suite` together."""
    a, b = await check_scenarios(), await check_suite()
    return CrossCheck(
        a.runs + b.runs, a.calls + b.calls, a.unjudged + b.unjudged, a.breaches + b.breaches
    )
