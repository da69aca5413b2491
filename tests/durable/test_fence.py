"""The digest that fences tether's changes to DBOS's private code: a class's is taken
without the ast module (Python 3.11's is not safe across threads) and still changes with
any of its methods or attributes."""

from __future__ import annotations

import ast
import importlib
import linecache
import sys
from pathlib import Path

import pytest

from tether.durable.fence import source_digest

CLASS = """
class Held:
    limit = 3

    def __init__(self) -> None:
        self.n = 0

    @staticmethod
    def make() -> "Held":
        return Held()

    @property
    def full(self) -> bool:
        return self.n >= self.limit
"""


def digest_of(tmp_path: Path, source: str, name: str) -> str:
    (tmp_path / f"{name}.py").write_text(source)
    linecache.checkcache()
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(name)
        return source_digest(module.Held)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def test_a_class_digest_never_parses_with_ast(monkeypatch: pytest.MonkeyPatch) -> None:
    from dbos import _core, _outcome

    before = source_digest(_outcome.Pending, _core.ActiveWorkflowById)

    calls: list[object] = []

    def refuse(*args: object, **_kwargs: object) -> None:
        calls.append(args)
        raise RuntimeError("ast.parse called")

    with monkeypatch.context() as patched:
        patched.setattr(ast, "parse", refuse)
        try:
            after = source_digest(_outcome.Pending, _core.ActiveWorkflowById)
        except RuntimeError:
            after = ""
    assert calls == []
    assert after == before


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("self.n = 0", "self.n = 1"),  # a method's body
        ("return Held()", "return Held().make()"),  # a static method's
        ("self.n >= self.limit", "self.n > self.limit"),  # a property's getter
        ("limit = 3", "ceiling = 3"),  # an attribute's name
        ("class Held:", "class Held(dict):"),  # its bases
    ],
)
def test_a_class_digest_changes_with_its_code(tmp_path: Path, old: str, new: str) -> None:
    assert old in CLASS
    first = digest_of(tmp_path, CLASS, "fenced_a")
    assert digest_of(tmp_path, CLASS, "fenced_b") == first  # the same code, the same digest
    assert digest_of(tmp_path, CLASS.replace(old, new), "fenced_c") != first
