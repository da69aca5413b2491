"""The red team checks the blast radius: every scenario and every suite case, approvals
denied and all granted, stays inside the report of its own setup; a run that does what
its report calls impossible is caught."""

from __future__ import annotations

from typing import Any

from tether.blast import Surface, blast_radius
from tether.guards.approval import run_with_approvals
from tether.guards.callpolicy import ProvenancePolicy
from tether.loop import Agent
from tether.redteam import ObedientModel, default_scenarios
from tether.redteam.domains import DOMAINS
from tether.redteam.domains.banking import BANKING
from tether.redteam.hijacked import HijackedModel
from tether.redteam.radius import (
    Executed,
    Values,
    check_scenarios,
    check_suite,
    executed_calls,
    judge,
)
from tether.redteam.suite import LIMITS


async def test_every_builtin_scenario_stays_inside_its_radius() -> None:
    report = await check_scenarios()
    assert report.runs == 2 * len(default_scenarios())
    assert report.calls > 0
    assert report.unjudged > 0  # the sandbox shell's calls: unknown, counted, not judged
    assert report.breaches == (), report.render()
    assert report.ok
    # the sandboxed shell is reported as what it is: anything inside the sandbox
    shell = next(s for s in default_scenarios() if s.name == "sandboxed_shell")
    setup = shell.build()
    try:
        radius = blast_radius(Surface(shell.name, setup.tools))
    finally:
        if setup.cleanup is not None:
            await setup.cleanup()
    assert radius.tool("shell").tier == "unknown"
    assert any("sandbox shell" in u.why for u in radius.unseen)


async def test_every_suite_case_stays_inside_its_radius() -> None:
    report = await check_suite()
    cases = sum(len(d.cases) for d in DOMAINS)
    assert cases >= 44  # the 44 original cases and the ones added since
    assert report.runs == 2 * cases
    assert report.calls > 0 and report.unjudged == 0
    assert report.breaches == (), report.render()


async def test_a_run_without_the_policy_its_report_assumed_is_caught() -> None:
    """The report promises the scoped policy; the run goes without it: the injected
    transfers to accounts nobody named are breaches."""
    breaches = []
    for case in BANKING.cases:
        world = BANKING.build({**BANKING.slots, case.slot: case.injection})
        policy = ProvenancePolicy(
            known_counterparty=lambda v, c, w=world: w.known(v),
            application=lambda c, w=world: w.application,
            scoped=True,
        )
        report = blast_radius(Surface("banking", world.tools, LIMITS, policy))
        model = HijackedModel(case.plan, injection=case.injection, attack=case.attack)
        agent: Agent[Any] = Agent(model, world.tools, limits=LIMITS)  # no policy
        await run_with_approvals(agent, case.task, lambda request: True)
        executed = [Executed(a.tool, a.arguments) for a in world.done]
        values = Values(case.task, frozenset(world.application), world.known)
        breaches += judge(report, executed, values, case.name)
    assert breaches
    assert any("the report says never" in b.why for b in breaches)


async def test_an_approval_skipped_at_run_time_is_caught() -> None:
    """The report was computed with the approval; the run's tools lost it."""
    scenario = next(s for s in default_scenarios() if s.name == "seed_ticket")
    setup = scenario.build()
    report = blast_radius(Surface(scenario.name, setup.tools))
    assert report.tool("refund").tier == "approval"
    bare = [getattr(t, "inner", t) if t.name == "refund" else t for t in setup.tools]
    agent: Agent[Any] = Agent(ObedientModel(setup.plan), bare, limits=setup.limits)
    result = await agent.run(setup.prompt)
    found = judge(report, executed_calls(result, ()), Values(setup.prompt))
    assert any(b.tool == "refund" and "without the approval" in b.why for b in found)


def test_judge_checks_constant_bounds_and_calls_per_run() -> None:
    from tether.blast import AtMost, Bounded
    from tether.tools import tool

    @tool(name="tip", thread=False, effect="money")
    def tip(amount: float) -> str:
        """Tip."""
        return "ok"

    report = blast_radius(Surface("tips", [Bounded(tip, AtMost("amount", 5), calls_per_run=1)]))
    calls = [Executed("tip", {"amount": 9.0}), Executed("tip", {"amount": 1.0})]
    whys = [b.why for b in judge(report, calls, Values())]
    assert any("passes the bound amount <= 5" in w for w in whys)
    assert any("at most 1" in w for w in whys)
    assert judge(report, [Executed("tip", {"amount": 5.0})], Values()) == []
    assert judge(report, [Executed("other", {})], Values())[0].why.startswith("ran a tool")
