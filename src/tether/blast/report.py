"""The blast-radius report: typed, JSON both ways, and short text for a terminal.

Every field is computed from declarations (:mod:`tether.blast.analyse`). A *tier* says how
far a model whose every output an attacker chose can take something: ``no_human`` (it
runs), ``approval`` (after one human approval), ``never`` (denied, or no approval can
allow it), ``unknown`` (the report cannot see: never read as safe).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "EFFECTS",
    "TIER_RANK",
    "Approval",
    "BlastRadius",
    "Bound",
    "Destination",
    "EffectReach",
    "Flow",
    "Tier",
    "ToolReach",
    "Unseen",
    "weakest",
]

Tier = Literal["never", "approval", "no_human", "unknown"]
TIER_RANK: dict[str, int] = {"never": 0, "approval": 1, "no_human": 2, "unknown": 3}
"""From the narrowest to the widest: a change up this order widens the radius."""
EFFECTS: tuple[str, ...] = ("money", "destructive", "communicate", "credential", "write", "read")
"""Effect classes ranked by harm, the worst first."""
_TIER_TEXT = {
    "never": "never",
    "approval": "after 1 approval",
    "no_human": "no human",
    "unknown": "UNKNOWN",
}


def weakest(*tiers: Tier) -> Tier:
    """The widest of ``tiers`` (``never`` when there is none)."""
    return max(tiers, key=TIER_RANK.__getitem__, default="never")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Approval(_Model):
    """Who approves a call and what they are shown."""

    approver: str
    shows: tuple[str, ...]
    confirm: str = ""
    """How the approver confirms, when it is more than a click."""
    inline: bool = False
    """Asked inside the call (else the run waits for a decision)."""


class Bound(_Model):
    """One declared, enforced bound on an argument."""

    argument: str
    text: str
    limit: float | None = None
    """The number, when the bound is a constant."""
    application_value: str | None = None
    """What the application reads at call time, when the bound is one."""
    above: float | None = None
    unit: str = ""


class ToolReach(_Model):
    """One tool: how far a hijacked run can take it."""

    name: str
    effect: str
    """The declared effect, ``undeclared`` when there is none."""
    tier: Tier
    needs: tuple[str, ...] = ()
    """What the call needs to reach its tier (values the user or application gave)."""
    approval: Approval | None = None
    bounds: tuple[Bound, ...] = ()
    calls_per_run: int | None = None
    money_per_call: str | None = None
    money_per_run: str | None = None
    refused: tuple[str, ...] = ()
    """What is never allowed on it."""
    checks: tuple[str, ...] = ()
    """Code that can only refuse calls (argument checks), named, not read."""


class EffectReach(_Model):
    """One effect class: the widest tier any tool gives it."""

    effect: str
    tier: Tier
    tools: tuple[str, ...]


class Destination(_Model):
    """Where an argument can send an action, by where its value comes from.

    ``tiers`` maps ``user``, ``application``, ``registry`` (values the user, the
    application or its counterparty registry gave) and ``any`` (any other value) to a
    tier; a tool whose destination is fixed has the single key ``fixed``."""

    tool: str
    argument: str
    role: str
    tiers: dict[str, Tier]


class Flow(_Model):
    """Data a tool reads, and a place it could go."""

    source: str
    kind: Literal["third_party", "system", "credential", "unknown"]
    sink: str
    tier: Tier


class Unseen(_Model):
    """Something the report cannot see, stated as such."""

    subject: str
    why: str


class BlastRadius(_Model):
    """What a fully hijacked run can at worst do, from the declarations."""

    name: str
    assumption: str
    tools: tuple[ToolReach, ...]
    effects: tuple[EffectReach, ...]
    destinations: tuple[Destination, ...]
    objects: tuple[Destination, ...] = ()
    """What side-effect calls act on (``object`` arguments), by where the value comes from
    (``system``: a field of a system of record)."""
    flows: tuple[Flow, ...]
    max_turns: int
    calls_per_turn: int | None = None
    """``None``: a turn may hold any number of calls."""
    approvals_per_run: int | None = None
    """Most approval prompts in a run, when the policy caps them."""
    policy: str = "none"
    unseen: tuple[Unseen, ...] = ()

    def tool(self, name: str) -> ToolReach:
        """The entry of tool ``name`` (``KeyError`` when the report has none)."""
        for t in self.tools:
            if t.name == name:
                return t
        raise KeyError(name)

    def effect(self, name: str) -> EffectReach:
        """The entry of effect class ``name``."""
        for e in self.effects:
            if e.effect == name:
                return e
        raise KeyError(name)

    def render(self) -> str:
        """Short text for a terminal: effects ranked by harm, then where things can go."""
        lines = [f"blast radius of {self.name}: {self.assumption}", self.summary(), "at worst:"]
        for e in self.effects:
            lines.extend(self._effect_lines(e))
        lines.append(
            "destinations: " + (_places(self.destinations) or "none (no argument names one)")
        )
        if self.objects:
            lines.append("acts on: " + _places(self.objects))
        lines.append("data read: " + self._flows())
        turns = f"at most {self.max_turns} turns"
        per_turn = "calls in a turn not capped"
        if self.calls_per_turn is not None:
            per_turn = f"at most {self.calls_per_turn} calls a turn"
        asks = ""
        if self.approvals_per_run is not None:
            asks = f"; at most {self.approvals_per_run} approval prompts"
        lines.append(f"run: {turns}; {per_turn}{asks}; policy: {self.policy}")
        if self.unseen:
            lines.append("cannot see (unknown, not safe):")
            lines.extend(f"  - {u.subject}: {u.why}" for u in self.unseen)
        else:
            lines.append("cannot see: nothing (every tool declares its effect)")
        return "\n".join(lines)

    def summary(self) -> str:
        """One line: the reachable side effects, the most harmful first, and what it
        cannot do or cannot see."""
        parts = []
        for e in self.effects:
            if e.effect == "read" or e.tier == "never":
                continue
            what = f"{e.effect} {_TIER_TEXT[e.tier]}"
            if e.tier == "approval":
                approvers = {a.approver.split(" on ")[0] for a in self._approvals(e)}
                what = f"{e.effect} only after 1 approval by {', '.join(sorted(approvers))}"
            caps = list(dict.fromkeys(self.tool(n).money_per_run or "" for n in e.tools))
            caps = [c for c in caps if c]
            if any(c.startswith("any amount") for c in caps):
                what += " (any amount: no declared bound)"
            elif caps:
                what += f" (at most {'; '.join(caps)} a run)"
            parts.append(what)
        communicate = next((e for e in self.effects if e.effect == "communicate"), None)
        if communicate is not None and communicate.tier == "never" and not self.destinations:
            parts.append("it can send nothing")
        if self.unseen:
            parts.append(f"{len(self.unseen)} thing(s) it cannot see")
        return "in short: " + ("; ".join(parts) or "no side effect reachable")

    def _approvals(self, e: EffectReach) -> list[Approval]:
        found = (self.tool(n).approval for n in e.tools)
        return [a for a in found if a is not None]

    def _effect_lines(self, e: EffectReach) -> list[str]:
        head = f"  {e.effect:<12} {_TIER_TEXT[e.tier]:<17}"
        pad = " " * len(head)
        if not e.tools:
            if e.tier == "unknown":
                return [f"{head} no declared tool, but an undeclared one may do it"]
            what = "no tool: it can send nothing" if e.effect == "communicate" else "no tool"
            return [f"{head} {what}"]
        plain = [n for n in e.tools if not _details(self.tool(n), e.tier)]
        lines = [f"{head} {', '.join(plain)}"] if plain else []
        for name in e.tools:
            t = self.tool(name)
            detail = _details(t, e.tier)
            if not detail:
                continue
            lines.append(f"{pad if lines else head} {name}: {detail}")
            if t.approval is not None and t.tier == "approval":
                a = t.approval
                lines.append(f"{pad}   approver: {a.approver}")
                lines.append(f"{pad}   shown: {'; '.join(a.shows)}")
                if a.confirm:
                    lines.append(f"{pad}   confirms: {a.confirm}")
            lines.extend(f"{pad}   never: {r}" for r in t.refused)
        return lines

    def _flows(self) -> str:
        groups: dict[bool, list[Flow]] = {False: [], True: []}
        for f in self.flows:
            groups[f.kind == "credential"].append(f)
        texts = [_flow_text(fs) for fs in groups.values() if fs]
        return "; ".join(texts) or "none"


def _flow_text(flows: list[Flow]) -> str:
    sources = dict.fromkeys(f"{f.source} ({f.kind.replace('_', '-')})" for f in flows)
    reach = dict.fromkeys(
        f.sink + ("" if f.tier == "no_human" else f" [{_TIER_TEXT[f.tier]}]")
        for f in flows
        if f.tier != "never"
    )
    never = dict.fromkeys(f.sink for f in flows if f.tier == "never")
    text = f"{', '.join(sources)} -> {', '.join(reach)}" + (" only" if len(reach) == 1 else "")
    if never:
        text += f"; never to {', '.join(never)} (by value)"
    return text


def _places(rows: tuple[Destination, ...]) -> str:
    out = []
    for d in rows:
        tiers = ", ".join(f"{k} {_TIER_TEXT[v]}" for k, v in d.tiers.items())
        out.append(f"{d.tool}.{d.argument} ({tiers})")
    return "; ".join(out)


def _details(t: ToolReach, effect_tier: str) -> str:
    parts = [_TIER_TEXT[t.tier]] if t.tier != effect_tier else []
    parts += [b.text for b in t.bounds]
    if t.calls_per_run is not None:
        parts.append(f"at most {t.calls_per_run} call{'s' if t.calls_per_run > 1 else ''} a run")
    if t.bounds and t.calls_per_run is not None and t.money_per_run:
        parts.append(f"so at most {t.money_per_run} a run")
    elif t.money_per_run:
        parts.append(f"money a run: {t.money_per_run}")
    parts += [f"checked by {c}" for c in t.checks]
    parts += [f"needs {n}" for n in t.needs]
    extra = t.refused or (t.approval is not None and t.tier == "approval")
    if not parts and extra:
        parts.append(_TIER_TEXT[t.tier])
    return "; ".join(parts)
