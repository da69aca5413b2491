"""Writes one benchmark's table into its own marked section of docs/benchmarks.md."""

from __future__ import annotations

import platform
import re
import subprocess
import tarfile
from pathlib import Path

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
