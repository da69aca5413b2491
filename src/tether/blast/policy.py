"""How the default call policy shapes a tool's reach, read from its settings.

:func:`provenance_reach` restates the rules of
:class:`~tether.guards.callpolicy.ProvenancePolicy` per argument role, for a model that
may write any value it has seen: a counterparty the user, the application or its registry
gave passes; any other is asked (or, ``scoped`` or ``strict``, never allowed); an object
of a money or destructive call that the user or the application did not name is asked (or,
``scoped``, never allowed); a value read through a credential tool never goes out (by
value match: a rewritten value is not recognised).
"""

from __future__ import annotations

from tether.blast.report import TIER_RANK, Destination, Tier, weakest
from tether.guards.callpolicy import OUTWARD, ProvenancePolicy
from tether.tools import Tool

__all__ = ["provenance_reach"]


def provenance_reach(
    tool: Tool, p: ProvenancePolicy, gate: Tier
) -> tuple[Tier, list[str], list[str], list[Destination]]:
    """The tier, what it needs and what is refused, under the default call policy."""
    effect = tool.effect
    side = effect in OUTWARD
    sources = ["user"]
    if p.application is not None:
        sources.append("application")
    asked: Tier = "never" if p.max_prompts == 0 else "approval"
    arg_tiers: list[Tier] = []
    needs: list[str] = []
    refused: list[str] = []
    dests: list[Destination] = []
    for arg, role in tool.roles.items():
        tiers: dict[str, Tier] = {}
        if role == "counterparty":
            named = [*sources, *(["registry"] if p.known_counterparty is not None else [])]
            tiers = dict.fromkeys(named, "no_human")
            if p.scoped or (side and p.strict):
                tiers["any"] = "never"
            else:
                tiers["any"] = asked if side else "no_human"
            dests.append(Destination(tool=tool.name, argument=arg, role=role, tiers=tiers))
        elif role == "object" and side:
            tiers = dict.fromkeys(sources, "no_human")
            if p.scoped:
                tiers["any"] = "never"
            elif effect in p.object_effects:  # a system record's value passes unasked
                tiers.update({"system": "no_human", "any": asked})
            else:
                tiers["any"] = "no_human"
            dests.append(Destination(tool=tool.name, argument=arg, role=role, tiers=tiers))
        elif role == "credential" and side:
            tiers = {**dict.fromkeys(sources, "no_human"), "any": asked}
        if not tiers:
            continue
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
    if side and any(r == "content" for r in tool.roles.values()):
        needs.append(
            "links, addresses or account numbers in content from the user or application "
            "(any other: one approval)"
        )
    if effect == "communicate" and not dests:
        dests.append(
            Destination(tool=tool.name, argument="*", role="fixed", tiers={"fixed": "no_human"})
        )
    outward = effect == "communicate" or any(
        r in ("counterparty", "content") for r in tool.roles.values()
    )
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


def _or(who: str) -> str:
    parts = who.split(", ")
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} or {parts[-1]}"
