"""The README's main job: `tether demo` on the embedded model, offline, no API key."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tether.cli import app


def test_demo_runs_on_the_embedded_model(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("TETHER_MODEL", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    result = CliRunner().invoke(app, ["demo"])
    assert "Offline local model" in result.output  # the honest banner
    loading = result.output.index("loading SmolLM2-135M-Instruct.Q4_1.gguf (98 MB) on ")
    assert loading < result.output.index("model ready in ") < result.output.index("turn 1")
    assert 'call lire_commande({"numero":"C-1042"})' in result.output
    assert "outcome: completed" in result.output
    assert result.exit_code == 0, result.output


def test_demo_rejects_an_unknown_provider() -> None:
    result = CliRunner().invoke(app, ["demo", "--model", "nope:x"])
    assert result.exit_code == 2
    assert "unknown model provider 'nope'" in result.output
