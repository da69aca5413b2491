"""How the default call policy shapes a tool's reach, read from its settings.

:func:`provenance_reach` reads, per argument, the rule that
:class:`~tether.guards.callpolicy.ProvenancePolicy` itself enforces
(:meth:`~tether.guards.callpolicy.ProvenancePolicy.argument_rule`), for a model that may
write any value it has seen: where a value may come from to pass unasked, and what any
other value gets (no human, an approval, never). A value read through a credential tool
never goes out (by value match: a rewritten value is not recognised).
"""

from __future__ import annotations

from tether.blast.report import TIER_RANK, Destination, Tier, weakest
from tether.guards.callpolicy import ArgumentRule, ProvenancePolicy
from tether.tools import Tool

__all__ = ["provenance_reach"]


def provenance_reach(
    tool: Tool, p: ProvenancePolicy, gate: Tier
) -> tuple[Tier, list[str], list[str], list[Destination]]:
    """The tier, what it needs and what is refused, under the default call policy."""
    effect = tool.effect
    arg_tiers: list[Tier] = []
    needs: list[str] = []
    refused: list[str] = []
    dests: list[Destination] = []
    content = False  # the policy checks the links, addresses, accounts in content
    for arg in tool.roles:
        declared = p.argument_rule(tool, arg)
        if declared is None:
            continue
        if declared.rule == "provenance.content":
            content = True
            continue
        tiers = _tiers(declared, p.can_ask)
        if declared.role in ("counterparty", "object"):
            dests.append(Destination(tool=tool.name, argument=arg, role=declared.role, tiers=tiers))
        best = weakest(*tiers.values())
        arg_tiers.append(best)
        if TIER_RANK[tiers.get("any", "never")] < TIER_RANK[best]:
            who = ", ".join(
                "a system record" if k == "system" else k
                for k, v in tiers.items()
                if v == best and k != "any"
            )
            needs.append(f"'{arg}' from the {_or(who)}")
            other = tiers["any"]
            if other == "never":
                refused.append(f"{arg}: any other value (no approval can allow it)")
    if content:
        needs.append(
            "links, addresses or account numbers in content from the user or application "
            "(any other: one approval)"
        )
    if effect == "communicate" and not dests:
        dests.append(
            Destination(tool=tool.name, argument="*", role="fixed", tiers={"fixed": "no_human"})
        )
    arguments = [*tool.spec.parameters.get("properties", {}), *tool.roles]
    outward = any(p.sends_out(tool, a) for a in arguments)
    if outward:
        refused.append("a value read through a credential tool, in an outward argument (by value)")
    tier = weakest(*arg_tiers) if arg_tiers else "no_human"
    tier = min(tier, gate, key=TIER_RANK.__getitem__)
    if gate == "approval":
        dests = [
            d.model_copy(
                update={
                    "tiers": {
                        k: min(v, gate, key=TIER_RANK.__getitem__) for k, v in d.tiers.items()
                    }
                }
            )
            for d in dests
        ]
    return tier, needs, refused, dests


_OTHER: dict[str, Tier] = {"allow": "no_human", "ask": "approval", "deny": "never"}


def _tiers(declared: ArgumentRule, can_ask: bool) -> dict[str, Tier]:
    """Per origin of a value, the tier the policy's rule for the argument gives it."""
    other = _OTHER[declared.other] if can_ask or declared.other != "ask" else "never"
    return {**dict.fromkeys(declared.passes, "no_human"), "any": other}


def _or(who: str) -> str:
    parts = who.split(", ")
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} or {parts[-1]}"
