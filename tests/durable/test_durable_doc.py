"""The example of docs/durable.md runs as written and prints what the page says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).parents[2] / "docs" / "durable.md"


def test_the_documented_example_runs(tmp_path: Path) -> None:
    text = DOC.read_text()
    section = text[text.index("## Example") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    script = tmp_path / "example.py"
    script.write_text(code.group(1))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "approve? [('refund', {'amount': 89.9})]" in done.stdout
    assert "Your refund of 89.90 EUR is on its way. {'ticket-1042:call_1': 89.9}" in done.stdout
