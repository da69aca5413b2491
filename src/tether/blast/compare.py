"""Compare a report with its baseline: every way the radius grew, one sentence each.

A widening is a tool, effect class, destination or data flow that is new or reachable
more easily (``never`` -> ``approval`` -> ``no_human`` -> ``unknown``), an approval
removed, a bound raised or dropped, a calls-per-run bound raised or dropped, more turns or
approval prompts, or something new the report cannot see. Narrowing is never reported.
"""

from __future__ import annotations

from tether.blast.report import TIER_RANK, BlastRadius, Bound, ToolReach

__all__ = ["widenings"]


def _wider(new: str, old: str) -> bool:
    return TIER_RANK[new] > TIER_RANK[old]


def _more(new: int | float | None, old: int | float | None) -> bool:
    """``None`` is unbounded: more than any number."""
    if new is None:
        return old is not None
    return old is not None and new > old


def widenings(baseline: BlastRadius, current: BlastRadius) -> list[str]:
    """What ``current`` can do that ``baseline`` could not, one sentence each."""
    out: list[str] = []
    old_tools = {t.name: t for t in baseline.tools}
    for t in current.tools:
        was = old_tools.get(t.name)
        if was is None:
            out.append(f"new tool {t.name} ({t.effect}): reachable {t.tier}")
            continue
        out.extend(_tool(t, was))
    old_effects = {e.effect: e for e in baseline.effects}
    for e in current.effects:
        was_e = old_effects.get(e.effect)
        if e.tier != "never" and (was_e is None or _wider(e.tier, was_e.tier)):
            before = was_e.tier if was_e is not None else "never"
            out.append(f"effect {e.effect}: now reachable {e.tier} (was {before})")
    old_dest = {(d.tool, d.argument): d for d in (*baseline.destinations, *baseline.objects)}
    for d in (*current.destinations, *current.objects):
        was_d = old_dest.get((d.tool, d.argument))
        for source, tier in d.tiers.items():
            prev = was_d.tiers.get(source, "never") if was_d is not None else "never"
            if tier != "never" and _wider(tier, prev):
                kind = "object" if d.role == "object" else "destination"
                lost = "approval removed: " if prev == "approval" else ""
                out.append(
                    f"{kind} {d.tool}.{d.argument} ({d.role}): {lost}a value from {source} "
                    f"now reaches {tier} (was {prev})"
                )
    old_flows = {(f.source, f.sink): f.tier for f in baseline.flows}
    for f in current.flows:
        prev = old_flows.get((f.source, f.sink), "never")
        if f.tier != "never" and _wider(f.tier, prev):
            out.append(f"data from {f.source} can now reach {f.sink} ({f.tier}, was {prev})")
    if current.max_turns > baseline.max_turns:
        out.append(f"max turns raised from {baseline.max_turns} to {current.max_turns}")
    if _more(current.calls_per_turn, baseline.calls_per_turn):
        out.append(f"calls per turn raised: {baseline.calls_per_turn} -> {current.calls_per_turn}")
    if _more(current.approvals_per_run, baseline.approvals_per_run):
        out.append(
            f"approval prompts per run raised: {baseline.approvals_per_run} -> "
            f"{current.approvals_per_run or 'no cap'}"
        )
    old_unseen = {(u.subject, u.why) for u in baseline.unseen}
    out.extend(
        f"new unknown: {u.subject}: {u.why}"
        for u in current.unseen
        if (u.subject, u.why) not in old_unseen
    )
    return out


def _tool(t: ToolReach, was: ToolReach) -> list[str]:
    out = []
    if _wider(t.tier, was.tier):
        what = "approval removed: " if was.tier == "approval" and t.tier == "no_human" else ""
        out.append(f"tool {t.name}: {what}now reachable {t.tier} (was {was.tier})")
    if t.effect != was.effect and t.effect != "read":
        out.append(f"tool {t.name}: effect changed from {was.effect} to {t.effect}")
    if was.approval is not None and t.approval is not None:
        if was.approval.confirm and not t.approval.confirm:
            out.append(f"tool {t.name}: the approver no longer confirms ({was.approval.confirm})")
        gone = [s for s in was.approval.shows if s not in t.approval.shows]
        if gone:
            out.append(f"tool {t.name}: the approver is no longer shown {', '.join(gone)}")
    old_bounds = {b.argument: b for b in was.bounds}
    new_bounds = {b.argument: b for b in t.bounds}
    for arg, b in old_bounds.items():
        now = new_bounds.get(arg)
        if now is None:
            out.append(f"tool {t.name}: bound dropped: {b.text}")
        elif _raised(now, b):
            out.append(f"tool {t.name}: bound raised: {b.text} -> {now.text}")
    if _more(t.calls_per_run, was.calls_per_run):
        now_calls = t.calls_per_run if t.calls_per_run is not None else "no bound"
        out.append(f"tool {t.name}: calls per run raised: {was.calls_per_run} -> {now_calls}")
    for r in was.refused:
        if r not in t.refused:
            out.append(f"tool {t.name}: no longer refused: {r}")
    return out


def _raised(now: Bound, was: Bound) -> bool:
    if was.application_value is not None:
        return now.application_value != was.application_value
    if now.limit is None:  # a constant became an application value: review it
        return True
    if was.limit is not None and now.limit > was.limit:
        return True
    return (was.above is not None) and (now.above is None or now.above < was.above)
