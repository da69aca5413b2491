"""Every Python block of README.md and docs/*.md runs as written.

The conventions below are the only ones; README.md ("Examples in the docs") points here.

- A fenced block whose info string starts with ``python`` (or ``py``) is run on its own, in
  a fresh process and an empty working directory, as a script. Top-level ``await`` is
  allowed, as in ``python -m asyncio``.
- ``python continues`` runs the block after the previous Python block of the same file, in
  the names it left (one script told in several parts).
- ``python test="skip" reason="..."`` is not run; the reason says what it needs (a server,
  an API key, a real host). Keep these rare: the test below caps them.
- Shell sessions are ``sh`` blocks, outputs ``text``: neither is Python.

Blocks are found with ``pytest-examples``; a failure names the file and line of the block,
and the traceback points into the Markdown file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pytest_examples import CodeExample, find_examples

from tether.state_seal import KEYS_ENV

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK_TIMEOUT = 180
MAX_NOT_RUN_SHARE = 0.15
PYTHON = {"python", "py", "python3", "py3"}

RUNNER = r"""
import ast, asyncio, json, sys, types
parts = json.load(sys.stdin)
module = types.ModuleType("__main__")
module.__dict__["__builtins__"] = __builtins__
sys.modules["__main__"] = module
for part in parts:
    padded = "\n" * part["line"] + part["source"]
    code = compile(padded, part["path"], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    pending = eval(code, module.__dict__)
    if pending is not None:
        asyncio.run(pending)
"""


def _language(example: CodeExample) -> str:
    words = example.prefix.split()
    return words[0] if words else ""


def _python_blocks() -> list[CodeExample]:
    return [e for e in find_examples(*DOCS) if _language(e) in PYTHON]


def _not_run(example: CodeExample) -> bool:
    return example.prefix_settings().get("test") == "skip"


def _continues(example: CodeExample) -> bool:
    return "continues" in example.prefix.split()[1:]


def _chain(example: CodeExample, blocks: list[CodeExample]) -> list[CodeExample]:
    """The block and, if it continues, the blocks of the same file it follows."""
    same_file = [b for b in blocks if b.path == example.path and not _not_run(b)]
    index = next(i for i, b in enumerate(same_file) if b.start_line == example.start_line)
    chain = [example]
    while _continues(chain[0]):
        if index == 0:
            raise AssertionError(f"{example}: `continues` but no Python block comes before it")
        index -= 1
        chain.insert(0, same_file[index])
    return chain


def _where(example: CodeExample) -> str:
    return f"{example.path.relative_to(ROOT)}:{example.start_line}"


BLOCKS = _python_blocks()
RUN = [b for b in BLOCKS if not _not_run(b)]

# A block runs as a reader would run it: without the run-state key the tests share.
READER_ENV = {k: v for k, v in os.environ.items() if k != KEYS_ENV}


@pytest.mark.parametrize("example", RUN, ids=_where)
def test_block_runs(example: CodeExample, tmp_path: Path) -> None:
    parts = [
        {"path": str(b.path), "line": b.start_line, "source": b.source}
        for b in _chain(example, BLOCKS)
    ]
    try:
        done = subprocess.run(
            [sys.executable, "-c", RUNNER],
            input=json.dumps(parts),
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=READER_ENV,
            timeout=BLOCK_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{_where(example)}: the block ran past {BLOCK_TIMEOUT} s", pytrace=False)
    if done.returncode != 0:
        pytest.fail(
            f"{_where(example)}: the block fails (exit {done.returncode}); "
            f"fix it or mark it as the docstring of {Path(__file__).name} says.\n"
            f"{done.stderr[-4000:]}",
            pytrace=False,
        )


def test_blocks_are_counted(capsys: pytest.CaptureFixture[str]) -> None:
    not_run = [b for b in BLOCKS if _not_run(b)]
    without_reason = [_where(b) for b in not_run if not b.prefix_settings().get("reason")]
    assert not without_reason, f"blocks marked not run without a reason: {without_reason}"
    assert len(RUN) >= 30, f"only {len(RUN)} Python blocks found in the docs"
    assert len(not_run) <= MAX_NOT_RUN_SHARE * len(BLOCKS), (
        f"{len(not_run)} of {len(BLOCKS)} blocks are not run: {[_where(b) for b in not_run]}"
    )
    with capsys.disabled():
        print(f"\ndocs: {len(RUN)} Python blocks run, {len(not_run)} marked not run")
