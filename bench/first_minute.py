"""A new user's first minute: fresh clone, empty uv cache, ``uv sync``, first demo answer.

Run: ``uv run python bench/first_minute.py`` (from a checkout; it clones the committed
HEAD into a temporary folder, so uncommitted changes are not measured). ``UV_CACHE_DIR``
points at a new, empty folder, so every package is downloaded and installed as on a machine
that never ran uv; the package index is whatever this machine's uv uses. Prints a table:
clone, ``uv sync --locked``, then ``uv run tether demo`` up to its first line, the model
loaded, and the answer. Nothing is compiled on the way (CI checks that too).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKS = {"loading": "loading ", "model ready": "model ready", "answer": "answer:"}


def clean_env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "VIRTUAL_ENV"))}
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "UV_PROJECT_ENVIRONMENT"):
        env.pop(key, None)
    env["UV_CACHE_DIR"] = str(cache)
    env["NO_COLOR"] = "1"
    return env


def run(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
    return time.perf_counter() - start


def demo(cwd: Path, env: dict[str, str]) -> dict[str, float]:
    """Seconds from starting ``uv run tether demo`` to its first line and to each mark."""
    start = time.perf_counter()
    seen: dict[str, float] = {}
    argv = ["uv", "run", "--locked", "tether", "demo"]
    with subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        for line in process.stdout:
            now = time.perf_counter() - start
            seen.setdefault("first line", now)
            for name, text in MARKS.items():
                if line.startswith(text):
                    seen.setdefault(name, now)
    if process.returncode or "answer" not in seen:
        sys.exit(f"tether demo failed (exit code {process.returncode})")
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument("--rev", default="HEAD", help="the commit to measure (default: HEAD)")
    args = parser.parse_args()
    if shutil.which("uv") is None:
        sys.exit("uv is not on PATH: pip install uv")
    folder = Path(tempfile.mkdtemp(prefix="tether-first-minute-"))
    try:
        cache, clone = folder / "uv-cache", folder / "tether"
        cache.mkdir()
        env = clean_env(cache)
        rows = [("git clone", run(["git", "clone", "--quiet", str(ROOT), str(clone)], folder, env))]
        run(["git", "checkout", "--quiet", args.rev], clone, env)
        rows.append(("uv sync --locked (empty cache)", run(["uv", "sync", "--locked"], clone, env)))
        marks = demo(clone, env)
        for name in ("first line", "loading", "model ready", "answer"):
            if name in marks:
                rows.append((f"tether demo: {name}", marks[name]))
        total = rows[0][1] + rows[1][1] + marks["answer"]
        load = os.getloadavg()[0]
        print(f"revision: {args.rev}, cpus: {os.cpu_count()}, load average: {load:.1f}\n")
        print("| step | seconds |\n|---|---|")
        for name, seconds in rows:
            print(f"| {name} | {seconds:.1f} |")
        print(f"| **clone to first answer** | **{total:.1f}** |")
    finally:
        if args.keep:
            print(f"\nkept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
