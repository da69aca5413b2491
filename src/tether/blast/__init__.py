"""Blast radius: what a fully hijacked run can at worst do, from the declarations.

:func:`blast_radius` computes a typed :class:`BlastRadius` for an agent (or a
:class:`Surface`); :class:`Bounded` declares the bounds a tool states and enforces them
with the same objects the report reads; :func:`widenings` compares a report with a
baseline and names every way the radius grew.
"""

from tether.blast.analyse import ASSUMPTION, Surface, blast_radius, chain, surfaces
from tether.blast.bounds import AppValue, AtMost, Bounded, Refusal
from tether.blast.compare import widenings
from tether.blast.report import (
    Approval,
    BlastRadius,
    Bound,
    Destination,
    EffectReach,
    Flow,
    ToolReach,
    Unseen,
)

__all__ = [
    "ASSUMPTION",
    "AppValue",
    "Approval",
    "AtMost",
    "BlastRadius",
    "Bound",
    "Bounded",
    "Destination",
    "EffectReach",
    "Flow",
    "Refusal",
    "Surface",
    "ToolReach",
    "Unseen",
    "blast_radius",
    "chain",
    "surfaces",
    "widenings",
]
