"""CI: no dependency is built from source, whatever uv's cache holds.

Reads ``uv.lock`` and the environment's installed distributions. Every locked package but
the project itself must have at least one wheel (none is source-only, on any platform), and
each installed one must be locked with a wheel whose tags this interpreter accepts, so a
fresh ``uv sync`` needs no compiler here. Exits non-zero, naming each offender, otherwise.
"""

from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename

PROJECT = "tether"


def main() -> int:
    lock = tomllib.loads((Path(__file__).parent.parent / "uv.lock").read_text())
    locked = {(canonicalize_name(p["name"]), p.get("version")): p for p in lock["package"]}
    accepted = set(sys_tags())
    installed = {
        (canonicalize_name(d.metadata["Name"]), d.version)
        for d in metadata.distributions()
        if canonicalize_name(d.metadata["Name"]) != PROJECT
    }
    problems = [
        f"{name} {version}: only a source distribution in uv.lock"
        for (name, version), package in sorted(locked.items())
        if name != PROJECT and not package.get("wheels")
    ]
    for name, version in sorted(installed):
        package = locked.get((name, version))
        if package is None:
            problems.append(f"{name} {version}: installed but not in uv.lock")
            continue
        files = [w["url"].rsplit("/", 1)[-1] for w in package.get("wheels", [])]
        if not any(parse_wheel_filename(f)[3] & accepted for f in files):
            problems.append(f"{name} {version}: no wheel for this platform in uv.lock")
    for line in problems:
        print(f"source build needed: {line}", file=sys.stderr)
    print(
        f"{len(locked) - 1} locked packages and {len(installed)} installed distributions "
        f"checked: {len(problems)} without a wheel"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
