"""Failures a programmer must see: a raising tool is logged with its traceback (the model
reads only that it failed), ``tether lint`` flags untyped parameters, and a log search on
a missing folder says so in one sentence."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tether import Agent, Limits, ScriptedClient, tool
from tether.cli import app
from tether.context.log_search import log_search_tool
from tether.errors import ConfigError
from tether.providers.scripted import call_reply, text_reply


@tool(thread=False)
def read(path: str) -> str:
    """Read a file. Use it for configuration files. It writes nothing.

    Args:
        path: The file to read.
    """
    raise OSError("disk /srv/secret-volume unreadable")


async def run_failing(detailed: bool) -> str:
    client = ScriptedClient([call_reply(("read", {"path": "a"})), text_reply("Sorry.")])
    agent = Agent(client, [read], limits=Limits(detailed_errors=detailed))
    result = await agent.run("Read a.")
    return result.transcript[2].tool_results[0].content


async def test_a_raising_tool_is_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="tether.tools"):
        seen_by_model = await run_failing(detailed=False)
    assert seen_by_model == "Tool 'read' failed."
    (record,) = [r for r in caplog.records if r.name == "tether.tools"]
    assert record.levelno == logging.ERROR and "'read'" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], OSError)
    assert "secret-volume" in caplog.text  # the traceback is in the log, not in the result


async def test_details_reach_the_model_only_when_asked() -> None:
    assert "secret-volume" in await run_failing(detailed=True)


def test_lint_flags_untyped_parameters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "untyped_tools.py").write_text(
        "from tether import tool\n\n"
        "@tool\n"
        "def refund(order, amount: float) -> str:\n"
        '    """Refund an order. Use it when asked. It cannot be undone.\n\n'
        "    Args:\n"
        "        order: The order number.\n"
        "        amount: The amount, in EUR.\n"
        '    """\n'
        '    return "ok"\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = CliRunner().invoke(app, ["lint", "untyped_tools:refund"])
    assert "parameter 'order' has no type" in out.output
    assert "parameter 'amount' has no type" not in out.output
    assert out.exit_code != 0


def test_log_search_on_a_missing_folder_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"the log folder .* does not exist"):
        log_search_tool(tmp_path / "missing")
    (tmp_path / "file.log").write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        log_search_tool(tmp_path / "file.log")
