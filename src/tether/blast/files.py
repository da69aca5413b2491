"""Reports as files: load a ``MODULE:OBJECT`` target, write and read JSON baselines, and
compare a set of reports with its baseline (what ``tether blast-radius`` does)."""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether.blast.analyse import report_of, surfaces
from tether.blast.compare import widenings
from tether.blast.report import BlastRadius

__all__ = ["dump_reports", "grown", "load_reports", "load_target", "reports_of"]


def load_target(target: str) -> Any:
    """The object named by ``MODULE:OBJECT``; ``ValueError`` with one sentence otherwise."""
    module_name, colon, path = target.strip().partition(":")
    if not colon or not module_name or not path:
        raise ValueError(f"{target!r} is not MODULE:OBJECT; write e.g. tether_desk.radius:REFUND")
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"cannot load {target}: {type(exc).__name__}: {exc}") from None
    for name in path.split("."):
        if not hasattr(value, name):
            raise ValueError(f"cannot load {target}: no attribute {path!r}; check the name")
        value = getattr(value, name)
    return value


def reports_of(target: Any, name: str) -> list[BlastRadius]:
    """One report per agent or surface in ``target``; ``ValueError`` when it holds none."""
    try:
        found = surfaces(target, name)
    except TypeError as exc:
        raise ValueError(f"{name}: {exc}") from None
    if not found:
        raise ValueError(f"{name} holds no agent")
    return [report_of(s) for s in found]


def dump_reports(reports: Sequence[BlastRadius]) -> str:
    """JSON: one report as an object, several as a list."""
    docs = [r.model_dump(mode="json") for r in reports]
    return json.dumps(docs[0] if len(docs) == 1 else docs, indent=2, ensure_ascii=False) + "\n"


def load_reports(path: str | Path) -> list[BlastRadius]:
    """The reports of a baseline file (``OSError`` or ``ValueError`` when unreadable)."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    items = doc if isinstance(doc, list) else [doc]
    return [BlastRadius.model_validate(item) for item in items]


def grown(baseline: Sequence[BlastRadius], current: Sequence[BlastRadius]) -> list[str]:
    """Every widening of ``current`` over ``baseline``, prefixed with the agent's name."""
    old = {r.name: r for r in baseline}
    out: list[str] = []
    for r in current:
        was = old.get(r.name)
        if was is None:
            out.append(f"{r.name}: a new agent, not in the baseline")
            continue
        out.extend(f"{r.name}: {line}" for line in widenings(was, r))
    return out
