"""The desk's blast radius: its agents as the report sees them.

``tether blast-radius tether_desk.radius:REFUND`` prints what a hijacked refund agent can
at worst do; ``tether_desk.radius:DESK`` reports every model-driven part of the desk.
The committed baseline is ``blast-radius.json`` next to this module.
"""

from __future__ import annotations

from pathlib import Path

from tether.blast import Surface
from tether.limits import Limits
from tether_desk.agent import REFUND_LIMITS, REFUND_TOOLS

__all__ = ["BASELINE", "DESK", "REFUND", "TRIAGE"]

BASELINE = Path(__file__).with_name("blast-radius.json")
"""The refund agent's committed report: a widening fails ``--check`` in CI."""

REFUND = Surface(
    "the desk's refund agent",
    REFUND_TOOLS,
    REFUND_LIMITS,
    approver="one staff member on the approval screen (the raw ticket with steering "
    "passages flagged, where each value came from)",
    confirm="types the amount when it refunds everything that remains on the order, or "
    "when the ticket's text tries to steer (tether_desk.approvals.friction_for)",
)
"""The refund agent: the only desk part whose model can call tools."""

TRIAGE = Surface("the desk's triage (one structured-output call, no tools)", (), Limits(2))
"""Triage: the model fills one blank (a category); code takes the path."""

DESK = {"refund": REFUND, "triage": TRIAGE}
"""Every model-driven part of the desk."""
