"""Writes one benchmark's table into its own marked section of docs/benchmarks.md."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
HEADER = """# Benchmarks

Each section is written by the script it names (`uv run python bench/NAME.py`); run one to
refresh its table. Numbers are from one run on the machine named in the section.
"""


def machine() -> str:
    """A short description of the machine the numbers come from."""
    import os

    python = f"{platform.python_implementation()} {platform.python_version()}"
    return f"{python}, {os.cpu_count()} CPUs, {platform.machine()}"


def write_section(name: str, markdown: str) -> None:
    """Replace (or append) the section ``name`` of docs/benchmarks.md."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{markdown.strip()}\n{end}"
    text = DOC.read_text() if DOC.exists() else HEADER
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = (
        pattern.sub(lambda _: block, text)
        if pattern.search(text)
        else f"{text.rstrip()}\n\n{block}\n"
    )
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text)


def export(rev: str, into: Path) -> Path:
    """``rev``'s src, exported with git archive."""
    archive = into / "rev.tar"
    with archive.open("wb") as f:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True, stdout=f)
    with tarfile.open(archive) as t:
        t.extractall(into / "rev", filter="data")
    return into / "rev" / "src"


def run_side(script: Path, src: Path | None, *args: object) -> dict[str, Any]:
    """``script`` with ``args`` in a process of its own, on this tree (``src`` None) or on
    an exported revision's ``src`` (the benchmarks' folder still importable); the JSON on
    its last line of output."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT / "bench")])
    out = subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        env=env,
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def interleaved(
    script: Path, against: str | None, rounds: int, *args: object
) -> dict[str, list[dict[str, Any]]]:
    """Each side's results of ``script``'s side (:func:`run_side`), round by round: this
    tree, and before it ``against``'s src when given, so the machine's load falls on both
    alike."""
    with tempfile.TemporaryDirectory(prefix="bench-sides-") as tmp:
        sides: dict[str, Path | None] = {}
        if against:
            sides[f"before ({against})"] = export(against, Path(tmp))
        sides["after" if against else "this tree"] = None
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label in sides}
        for _ in range(rounds):
            for label, src in sides.items():
                runs[label].append(run_side(script, src, *args))
    return runs
