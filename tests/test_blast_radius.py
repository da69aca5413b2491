"""The blast-radius report from declarations, the bounds it reads and the run enforces,
and the comparison that names every widening."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any

import pytest
from typer.testing import CliRunner

from tether.blast import (
    AppValue,
    AtMost,
    Bounded,
    Surface,
    blast_radius,
    widenings,
)
from tether.blast.files import dump_reports, load_reports
from tether.cli import app
from tether.errors import ConfigError, ToolFailure
from tether.guards.approval import requires_approval
from tether.guards.callpolicy import ArgumentRule, ProvenancePolicy
from tether.limits import Limits
from tether.loop import Agent
from tether.providers.scripted import ScriptedClient, call_reply, text_reply
from tether.rulings import Ruling
from tether.tools import DelegatingTool, RunContext, Tool, tool

Iban = Annotated[str, "Account to pay."]
Euros = Annotated[float, "Euros."]


def pay_tool(**roles: Any) -> Tool:
    paid: list[float] = []

    @tool(name="pay", thread=False, effect="money", roles=roles or {"iban": "counterparty"})
    def pay(iban: Iban, amount: Euros) -> str:
        """Pay an account."""
        paid.append(amount)
        return "paid"

    return pay


@tool(name="lookup", thread=False, effect="read", third_party=("*",))
def lookup() -> str:
    """Read the inbox."""
    return "hello"


@tool(name="mystery", thread=False)
def mystery(text: Annotated[str, "Anything."]) -> str:
    """A tool that declares nothing."""
    return text


BALANCE = AppValue("the account's balance", lambda arguments, ctx: ctx.deps["balance"])


def ctx(balance: float = 50.0) -> RunContext[Any]:
    return RunContext({"balance": balance}, run_id="r")


async def test_a_bound_is_enforced_by_the_objects_the_report_reads() -> None:
    bounded = Bounded(
        requires_approval(pay_tool()),
        AtMost("amount", BALANCE, unit="EUR", above=0),
        calls_per_run=1,
    )
    c = ctx(50.0)
    over = await bounded.ruling({"iban": "X", "amount": 80.0}, c)
    assert over.action == "deny" and "the account's balance (50 EUR)" in over.reason
    assert (await bounded.ruling({"iban": "X", "amount": 0}, c)).action == "deny"
    assert (await bounded.ruling({"iban": "X", "amount": 40.0}, c)).action == "ask"
    with pytest.raises(ToolFailure, match="above the account's balance"):
        await bounded.invoke({"iban": "X", "amount": 60.0}, c)  # checked again when it runs
    assert await bounded.invoke({"iban": "X", "amount": 40.0}, c) == "paid"
    second = await bounded.ruling({"iban": "X", "amount": 1.0}, c)
    assert second.action == "deny" and "at most 1 time in a run" in second.reason
    with pytest.raises(ToolFailure):
        await bounded.invoke({"iban": "X", "amount": 1.0}, c)
    report = blast_radius(Surface("payer", [bounded]))
    reach = report.tool("pay")
    assert reach.bounds[0].application_value == BALANCE.description
    assert reach.bounds[0].text == "0 < amount <= the account's balance"
    assert reach.calls_per_run == 1
    assert reach.money_per_run == "the account's balance"
    assert reach.tier == "approval" and reach.approval is not None


def test_a_bound_on_an_unknown_argument_is_refused() -> None:
    with pytest.raises(ConfigError):
        Bounded(pay_tool(), AtMost("sum", 10))
    with pytest.raises(ConfigError):
        Bounded(pay_tool())


async def test_the_loop_blocks_a_call_past_its_calls_per_run_bound() -> None:
    bounded = Bounded(pay_tool(), AtMost("amount", 100), calls_per_run=1)
    script = ScriptedClient(
        [
            call_reply(("pay", {"iban": "A", "amount": 10.0})),
            call_reply(("pay", {"iban": "A", "amount": 10.0})),
            text_reply("done"),
        ]
    )
    result = await Agent(script, [bounded], limits=Limits(max_turns=5)).run("pay twice")
    results = [r for m in result.transcript for r in m.tool_results]
    assert [r.status for r in results] == ["ok", "blocked"]
    assert "at most 1 time in a run" in results[1].content


def test_an_undeclared_tool_is_unknown_never_safe() -> None:
    report = blast_radius(Surface("blind", [lookup, mystery]))
    assert report.tool("mystery").tier == "unknown"
    assert report.tool("mystery").effect == "undeclared"
    assert any(u.subject == "mystery" for u in report.unseen)
    # with an undeclared tool, no effect class can be said never reachable
    assert {e.effect: e.tier for e in report.effects}["communicate"] == "unknown"
    text = report.render()
    assert "cannot see (unknown, not safe):" in text and "mystery: declares no effect" in text
    assert "can send nothing" not in text


def test_custom_ruling_code_is_unknown() -> None:
    class LetsThrough(DelegatingTool):
        async def ruling(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> Ruling:
            return Ruling("allow")

    report = blast_radius(Surface("custom", [LetsThrough(requires_approval(pay_tool()))]))
    assert report.tool("pay").tier == "unknown"
    assert any("custom ruling code" in u.why for u in report.unseen)


def test_the_default_policy_closes_destinations_the_task_did_not_name() -> None:
    policy = ProvenancePolicy(known_counterparty=lambda v, c: False, scoped=True)
    report = blast_radius(Surface("bank", [lookup, pay_tool()], policy=policy))
    (dest,) = report.destinations
    assert dest.tiers == {"user": "no_human", "registry": "no_human", "any": "never"}
    assert report.tool("pay").tier == "no_human"
    assert report.tool("pay").needs == ("'iban' from the user or registry",)
    open_policy = ProvenancePolicy(known_counterparty=lambda v, c: False)
    wider = blast_radius(Surface("bank", [lookup, pay_tool()], policy=open_policy))
    assert wider.destinations[0].tiers["any"] == "approval"
    assert any("pay.iban" in w and "from any" in w for w in widenings(report, wider))
    assert widenings(wider, report) == []  # narrowing is not a widening


def test_widenings_name_each_change() -> None:
    base = blast_radius(
        Surface("payer", [Bounded(requires_approval(pay_tool()), AtMost("amount", 10))])
    )
    no_approval = blast_radius(Surface("payer", [Bounded(pay_tool(), AtMost("amount", 10))]))
    assert widenings(base, no_approval) == [
        "tool pay: approval removed: now reachable no_human (was approval)",
        "effect money: now reachable no_human (was approval)",
        "destination pay.iban (counterparty): approval removed: a value from any now "
        "reaches no_human (was approval)",
    ]
    raised = blast_radius(
        Surface("payer", [Bounded(requires_approval(pay_tool()), AtMost("amount", 20))])
    )
    assert widenings(base, raised) == ["tool pay: bound raised: amount <= 10 -> amount <= 20"]
    unbounded = blast_radius(Surface("payer", [requires_approval(pay_tool())]))
    assert "tool pay: bound dropped: amount <= 10" in widenings(base, unbounded)
    more_turns = blast_radius(
        Surface(
            "payer",
            [Bounded(requires_approval(pay_tool()), AtMost("amount", 10))],
            Limits(max_turns=50),
        )
    )
    assert widenings(base, more_turns) == ["max turns raised from 20 to 50"]
    assert widenings(base, base) == []


def test_json_round_trips_and_the_cli_checks_a_baseline(tmp_path: Any) -> None:
    report = blast_radius(Surface("blind", [lookup, mystery]))
    path = tmp_path / "radius.json"
    path.write_text(dump_reports([report]))
    assert load_reports(path) == [report]
    runner = CliRunner()
    ok = runner.invoke(app, ["blast-radius", "tether_desk.radius:REFUND", "--json"])
    assert ok.exit_code == 0 and '"name": "the desk\'s refund agent"' in ok.output
    bad = runner.invoke(app, ["blast-radius", "tether_desk.radius:nothing_here"])
    assert bad.exit_code == 2 and "no attribute" in bad.output
    unreadable = tmp_path / "broken.json"
    unreadable.write_text("{")
    broken = runner.invoke(
        app, ["blast-radius", "tether_desk.radius:REFUND", "--check", str(unreadable)]
    )
    assert broken.exit_code == 2 and "cannot read the baseline" in broken.output


def test_objects_of_destructive_calls_are_reported_by_source() -> None:
    @tool(name="delete", thread=False, effect="destructive", roles={"item": "object"})
    def delete(item: Annotated[str, "What to delete."]) -> str:
        """Delete an item."""
        return "deleted"

    scoped = blast_radius(Surface("s", [delete], policy=ProvenancePolicy(scoped=True)))
    assert scoped.objects[0].tiers == {"user": "no_human", "any": "never"}
    assert "acts on: delete.item (user no human, any never)" in scoped.render()
    loose = blast_radius(Surface("s", [delete], policy=ProvenancePolicy()))
    assert loose.objects[0].tiers == {"user": "no_human", "system": "no_human", "any": "approval"}
    assert loose.tool("delete").approval is not None  # who decides the asked values
    assert widenings(scoped, loose) == [
        "tool delete: no longer refused: item: any other value (no approval can allow it)",
        "object delete.item (object): a value from system now reaches no_human (was never)",
        "object delete.item (object): a value from any now reaches approval (was never)",
    ]


def test_an_agent_a_list_and_a_dict_are_targets() -> None:
    from tether.blast import surfaces

    agent: Agent[Any] = Agent(
        ScriptedClient([]), [lookup], limits=Limits(max_turns=3), policy=ProvenancePolicy()
    )
    report = blast_radius(agent, "mailer")
    assert report.name == "mailer" and report.max_turns == 3
    assert report.policy == "ProvenancePolicy" and report.approvals_per_run == 5
    assert [s.name for s in surfaces({"a": agent, "b": [lookup]})] == ["a", "b"]
    with pytest.raises(ValueError, match="holds 2 agents"):
        blast_radius({"a": agent, "b": [lookup]})
    with pytest.raises(TypeError, match="not an agent"):
        surfaces(42)


class NeverFromTheRegistry(ProvenancePolicy):
    """A policy whose counterparty rule changed: the registry no longer vouches."""

    def argument_rule(self, tool: Tool, argument: str) -> ArgumentRule | None:
        declared = super().argument_rule(tool, argument)
        if declared is None or declared.role != "counterparty":
            return declared
        passes = tuple(p for p in declared.passes if p != "registry")
        return replace(declared, passes=passes, other="deny", rule="provenance.scope")


async def test_the_report_states_the_rule_the_policy_enforces() -> None:
    known = {"FR7630006000011234567890189"}
    changed = NeverFromTheRegistry(known_counterparty=lambda v, c: v in known)
    base = ProvenancePolicy(known_counterparty=lambda v, c: v in known)
    before = blast_radius(Surface("bank", [pay_tool()], policy=base))
    after = blast_radius(Surface("bank", [pay_tool()], policy=changed))
    assert before.destinations[0].tiers == {
        "user": "no_human",
        "registry": "no_human",
        "any": "approval",
    }
    assert after.destinations[0].tiers == {"user": "no_human", "any": "never"}
    assert "iban: any other value (no approval can allow it)" in after.tool("pay").refused
    # and the run enforces what the report says: the registry's payee is now refused
    iban = next(iter(known))
    for policy, action in ((base, "completed"), (changed, "denied")):
        agent = Agent(
            ScriptedClient([call_reply(("pay", {"iban": iban, "amount": 5.0})), text_reply("ok")]),
            [pay_tool()],
            policy=policy,
        )
        result = await agent.run("Pay my landlord 5 euros.")
        assert result.outcome.kind == "completed"
        (ruled,) = [m for m in result.transcript if m.tool_results]
        denied = ruled.tool_results[0].is_error
        assert denied is (action == "denied"), ruled.tool_results[0].content


def test_values_members_wrote_count_as_the_applications_in_the_report_too() -> None:
    """The policy passes a counterparty from a member-written field (origin application)
    even without an ``application`` hook; the report says so."""
    policy = ProvenancePolicy(members=lambda author: author == "alice")
    (dest,) = blast_radius(Surface("bank", [lookup, pay_tool()], policy=policy)).destinations
    assert dest.tiers == {"user": "no_human", "application": "no_human", "any": "approval"}
    assert policy.argument_rule(pay_tool(), "iban") == ArgumentRule(
        "counterparty", ("user", "application"), "ask", "provenance.counterparty"
    )
    assert ProvenancePolicy().argument_rule(pay_tool(), "amount") == ArgumentRule(
        "", ("user", "application", "system"), "ask", "provenance.content"
    )
