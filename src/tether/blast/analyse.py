"""Compute a :class:`~tether.blast.report.BlastRadius` from an agent's declarations.

The model is assumed hijacked: every call it can write, it writes, with any value it has
seen (the user's and the application's values included). Third-party text may flow into
every argument its role allows. What limits it is only what the code declares: each
tool's effect and argument roles, approvals, :class:`~tether.blast.bounds.Bounded`
bounds, refusals, the run's :class:`~tether.limits.Limits` and the default
:class:`~tether.guards.callpolicy.ProvenancePolicy`. What the report cannot read (a tool
with no declared effect, a custom ruling, a sandbox shell, a custom call policy) is listed
as unseen, and its tier is ``unknown``, never ``no_human`` by omission.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.blast.bounds import AppValue, Bounded, Refusal
from tether.blast.policy import provenance_reach
from tether.blast.report import (
    EFFECTS,
    Approval,
    BlastRadius,
    Bound,
    Destination,
    EffectReach,
    Flow,
    Tier,
    ToolReach,
    Unseen,
    weakest,
)
from tether.guards.approval import ApprovalRequired, InlineApproval
from tether.guards.callpolicy import OUTWARD, ProvenancePolicy
from tether.guards.policy import ArgumentPolicy
from tether.guards.provenance import TaintPolicy, Untrusted
from tether.limits import Limits
from tether.rulings import CallPolicy
from tether.tools import DelegatingTool, Tool

__all__ = ["ASSUMPTION", "Surface", "blast_radius", "chain", "report_of", "surfaces"]

ASSUMPTION = "a model whose every output an attacker chose"
_RULINGS = {
    Tool.ruling,
    DelegatingTool.ruling,
    ArgumentPolicy.ruling,
    Refusal.ruling,
    TaintPolicy.ruling,
    InlineApproval.ruling,
}
_NEEDS = {
    Tool.needs_approval,
    DelegatingTool.needs_approval,
    InlineApproval.needs_approval,
    TaintPolicy.needs_approval,  # only adds approvals
}
_NAMED = ("user", "application", "registry")


@dataclass(frozen=True, slots=True)
class Surface:
    """What a run can touch: an agent's tools, limits and policy, and who approves.

    Build one for a workflow (the tools its code calls with values a model filled in) or
    to name the approver; :func:`surfaces` makes one from an ``Agent`` itself."""

    name: str
    tools: Sequence[Tool]
    limits: Limits = field(default_factory=Limits)
    policy: CallPolicy | None = None
    approver: str = "a person"
    """Who decides an approval (``"one staff member"``)."""
    confirm: str = ""
    """How the approver confirms, when it is more than a click."""


def surfaces(target: Any, name: str = "agent") -> list[Surface]:
    """The surfaces of ``target``: a :class:`Surface`, an ``Agent``, a tool or a list of
    tools, or a list or dict of those (the agents of an application)."""
    from tether.loop import Agent

    if isinstance(target, Surface):
        return [target]
    if isinstance(target, Agent):
        return [Surface(name, list(target.tools.values()), target.limits, target.policy)]
    if isinstance(target, Tool):
        return [Surface(name, [target])]
    items: Iterable[tuple[str, Any]]
    if isinstance(target, Mapping):
        items = target.items()
    elif isinstance(target, Sequence) and not isinstance(target, str | bytes):
        if all(isinstance(t, Tool) for t in target):
            return [Surface(name, list(target))]
        items = ((f"{name}[{i}]", t) for i, t in enumerate(target))
    else:
        raise TypeError(
            f"{type(target).__qualname__} is not an agent, a surface or a list of tools"
        )
    return [s for key, value in items for s in surfaces(value, str(key))]


def chain(tool: Tool) -> Iterator[Tool]:
    """``tool`` and every tool it wraps, outermost first."""
    current: Tool | None = tool
    while current is not None:
        yield current
        inner = getattr(current, "inner", None)
        current = inner if isinstance(inner, Tool) else None


def blast_radius(target: Any, name: str = "agent") -> BlastRadius:
    """The report for one agent or surface (see the module doc)."""
    found = surfaces(target, name)
    if len(found) != 1:
        raise ValueError(f"{name} holds {len(found)} agents; use surfaces() and report each")
    return report_of(found[0])


def report_of(s: Surface) -> BlastRadius:
    """The report of one surface."""
    policy = s.policy
    unseen: list[Unseen] = []
    prov = policy if isinstance(policy, ProvenancePolicy) else None
    if policy is not None and prov is None:
        unseen.append(
            Unseen(
                subject=f"call policy {type(policy).__qualname__}",
                why="custom code, not read; the strictest ruling wins, so it can only ask "
                "or refuse more than this report says",
            )
        )
    reaches: list[ToolReach] = []
    destinations: list[Destination] = []
    for t in s.tools:
        reach, dests, seen = _tool(t, s, prov)
        reaches.append(reach)
        destinations.extend(dests)
        unseen.extend(seen)
    effects = []
    blind = any(r.effect == "undeclared" for r in reaches)
    for effect in ("undeclared", *EFFECTS):
        names = tuple(r.name for r in reaches if r.effect == effect)
        if effect == "undeclared" and not names:
            continue
        tier = weakest(*(r.tier for r in reaches if r.effect == effect))
        if not names and blind:
            tier = "unknown"  # an undeclared tool may do it
        effects.append(EffectReach(effect=effect, tier=tier, tools=names))
    return BlastRadius(
        name=s.name,
        assumption=ASSUMPTION,
        tools=tuple(reaches),
        effects=tuple(effects),
        destinations=tuple(d for d in destinations if d.role != "object"),
        objects=tuple(d for d in destinations if d.role == "object"),
        flows=tuple(_flows(s.tools, reaches, prov)),
        max_turns=s.limits.max_turns,
        approvals_per_run=prov.max_prompts if prov is not None else None,
        policy=_policy_name(policy),
        unseen=tuple(unseen),
    )


def _policy_name(policy: CallPolicy | None) -> str:
    if policy is None:
        return "none"
    if isinstance(policy, ProvenancePolicy):
        flags = [
            n
            for n in ("scoped", "strict")
            if getattr(policy, n)  # the two switches that close tiers
        ]
        return "ProvenancePolicy" + (f" ({', '.join(flags)})" if flags else "")
    return type(policy).__qualname__


def _tool(
    tool: Tool, s: Surface, prov: ProvenancePolicy | None
) -> tuple[ToolReach, list[Destination], list[Unseen]]:
    wrappers = list(chain(tool))
    base = wrappers[-1]
    unseen: list[Unseen] = []
    for w in wrappers:
        if type(w).ruling not in _RULINGS or type(w).needs_approval not in _NEEDS:
            unseen.append(
                Unseen(
                    subject=f"{tool.name}: {type(w).__qualname__}",
                    why="custom ruling code, not read: it may allow what this report "
                    "says waits or is refused",
                )
            )
    inline = any(isinstance(w, InlineApproval) for w in wrappers)
    gate: Tier = "approval" if tool.requires_approval or inline else "no_human"
    checks = tuple(
        dict.fromkeys(
            f"{type(w).__qualname__} (can only refuse)"
            for w in wrappers
            if isinstance(w, ArgumentPolicy | TaintPolicy)
            or (isinstance(w, Refusal) and not isinstance(w, Bounded))
        )
    )
    bounds, per_run = _bounds(wrappers)
    effect = tool.effect or "undeclared"
    if _is_shell(base):
        unseen.append(Unseen(subject=tool.name, why="a sandbox shell: anything inside it"))
        effect = "undeclared" if tool.effect is None else effect
    if tool.effect is None:
        unseen.append(Unseen(subject=tool.name, why="declares no effect: what it does is unknown"))
    needs: list[str] = []
    refused: list[str] = []
    tier = gate
    dests: list[Destination] = []
    if prov is not None and tool.effect is not None:
        tier, needs, refused, dests = provenance_reach(tool, prov, gate)
    else:
        dests = [
            Destination(tool=tool.name, argument=a, role=r, tiers={"any": gate})
            for a, r in tool.roles.items()
            if r == "counterparty" or (r == "object" and tool.effect in OUTWARD)
        ]
        if tool.effect == "communicate" and not dests:
            dests = [Destination(tool=tool.name, argument="*", role="fixed", tiers={"fixed": gate})]
    if unseen and any(u.why.startswith(("custom", "declares", "a sandbox")) for u in unseen):
        tier = "unknown"
    approval = None
    if gate == "approval" or "approval" in {tier, *(t for d in dests for t in d.tiers.values())}:
        approval = Approval(
            approver=s.approver,
            shows=_shows(tool, wrappers, prov),
            confirm=s.confirm,
            inline=inline,
        )
    calls = next((w.calls_per_run for w in wrappers if isinstance(w, Bounded)), None)
    money_call = money_run = None
    if tool.effect == "money":
        money_call = per_run or "any amount (no declared bound)"
        money_run = per_run if per_run and calls == 1 else None
        if per_run and calls and calls > 1:
            money_run = f"{calls} x ({per_run})"
        if money_run is None:
            money_run = "any amount (no declared per-run bound)"
    if prov is not None and prov.max_prompts is not None and tier == "approval":
        refused.append(f"past {prov.max_prompts} approval prompts in a run")
    return (
        ToolReach(
            name=tool.name,
            effect=effect,
            tier=tier,
            needs=tuple(needs),
            approval=approval,
            bounds=bounds,
            calls_per_run=calls,
            money_per_call=money_call,
            money_per_run=money_run,
            refused=tuple(refused),
            checks=checks,
        ),
        dests,
        unseen,
    )


def _is_shell(tool: Tool) -> bool:
    module = type(tool).__module__
    return module.startswith("tether.guards.sandbox")


def _bounds(wrappers: Sequence[Tool]) -> tuple[tuple[Bound, ...], str | None]:
    found: list[Bound] = []
    money: str | None = None
    for w in wrappers:
        if not isinstance(w, Bounded):
            continue
        for b in w.amounts:
            app = b.limit.description if isinstance(b.limit, AppValue) else None
            limit = None if isinstance(b.limit, AppValue) else float(b.limit)
            found.append(
                Bound(
                    argument=b.argument,
                    text=b.describe(),
                    limit=limit,
                    application_value=app,
                    above=b.above,
                    unit=b.unit,
                )
            )
            money = money or (app if app is not None else f"{limit:g} {b.unit}".strip())
    return tuple(found), money


def _shows(tool: Tool, wrappers: Sequence[Tool], prov: ProvenancePolicy | None) -> tuple[str, ...]:
    params = list(tool.spec.parameters.get("properties", {}))
    shows = [f"the call ({', '.join(params)})" if params else "the call", "why it waits"]
    for w in wrappers:
        if isinstance(w, ApprovalRequired | InlineApproval):
            context = getattr(w, "_context", None)  # the application's context function
            doc = (getattr(context, "__doc__", None) or "").strip()
            if doc:
                first = doc.split("\n\n")[0]
                text = " ".join(first.split()).rstrip(".")
                shows.append(text[:1].lower() + text[1:])
            elif context is not None:
                shows.append("what the application adds (undocumented)")
    if prov is not None:
        shows.append("where each argument came from and flagged third-party text")
    return tuple(dict.fromkeys(shows))


def _flows(
    tools: Sequence[Tool], reaches: Sequence[ToolReach], prov: ProvenancePolicy | None
) -> list[Flow]:
    by_name = {r.name: r for r in reaches}
    sources: list[tuple[str, Any]] = []
    for t in tools:
        if t.effect not in (None, "read", "credential"):
            continue
        if t.effect is None:
            kind = "unknown"
        elif t.effect == "credential":
            kind = "credential"
        elif t.third_party or any(isinstance(w, Untrusted) for w in chain(t)):
            kind = "third_party"
        else:
            kind = "system"
        sources.append((t.name, kind))
    sinks: list[tuple[str, Tier]] = []
    for t in tools:
        reach = by_name[t.name]
        if t.effect is None:
            sinks.append((f"{t.name} (any argument)", reach.tier))
            continue
        args = [
            a
            for a in t.spec.parameters.get("properties", {})
            if t.effect == "communicate"
            or (t.effect in OUTWARD and t.roles.get(a) in ("counterparty", "content"))
            or t.roles.get(a) == "counterparty"
        ]
        sinks.extend((f"{t.name}.{a}", reach.tier) for a in args)
    sinks.append(("the final answer (returned to the application)", "no_human"))
    flows = []
    for name, kind in sources:
        for sink, tier in sinks:
            t_tier = tier
            if kind == "credential" and prov is not None and not sink.startswith("the final"):
                t_tier = "never"
            flows.append(Flow(source=name, kind=kind, sink=sink, tier=t_tier))
    return flows
