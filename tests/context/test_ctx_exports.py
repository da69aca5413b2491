"""The public face of tether.context: every name resolves, importing loads nothing."""

from __future__ import annotations

import subprocess
import sys

import tether.context


def test_every_exported_name_resolves() -> None:
    assert sorted(tether.context.__all__) == sorted(dir(tether.context))
    for name in tether.context.__all__:
        assert getattr(tether.context, name) is not None


def test_importing_the_package_loads_no_submodule() -> None:
    code = (
        "import sys, tether.context; "
        "print(sorted(m for m in sys.modules if m.startswith('tether.context.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
