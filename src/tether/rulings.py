"""One ruling per call: allow, ask a human, or deny (the strictest of several wins)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Action", "Ruling", "strictest"]

Action = Literal["allow", "ask", "deny"]
_RANK = {"allow": 0, "ask": 1, "deny": 2}


@dataclass(frozen=True, slots=True)
class Ruling:
    """What happens to one call, and why."""

    action: Action
    reason: str = ""
    """One sentence, shown to the approver and the model."""
    rule: str = ""
    """Which rule decided, e.g. ``"provenance.counterparty"``."""
    details: Mapping[str, Any] = field(default_factory=dict)
    """JSON-ready data shown to approvers (per-argument origins, flagged text)."""


def strictest(*rulings: Ruling) -> Ruling:
    """The strictest ruling (deny > ask > allow); the first of equals; allow if none."""
    best = Ruling("allow")
    for ruling in rulings:
        if _RANK[ruling.action] > _RANK[best.action]:
            best = ruling
    return best
