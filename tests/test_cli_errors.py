"""The command line fails in one line, prints user text as is and never wraps a finding."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tether.cli import _print_event, app, console
from tether.events import RunFinished, ToolCallFinished, ToolCallStarted
from tether.messages import ToolCall, ToolResult
from tether.outcomes import Outcome

runner = CliRunner()

LONG_NAME = "look_up_an_order_by_its_identifier_and_return_its_status"
TOOLS_SOURCE = f'''
from tether import tool

@tool
def {LONG_NAME}(order_id: str) -> str:
    """Thin."""
    return order_id

TOOLS = [{LONG_NAME}]
'''


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "long_tools.py").write_text(TOOLS_SOURCE, encoding="utf-8")
    (tmp_path / "exploding.py").write_text(
        'raise RuntimeError("boom [/] [bold]x[/bold] :x:")\n', encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def one_line_error(result: object) -> str:
    """The single stderr line of a failed command (asserting it failed cleanly)."""
    assert result.exit_code == 2, result.output  # type: ignore[attr-defined]
    assert isinstance(result.exception, SystemExit), result.exception  # type: ignore[attr-defined]
    assert "Traceback" not in result.output  # type: ignore[attr-defined]
    lines = result.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1, result.stderr  # type: ignore[attr-defined]
    assert lines[0].startswith("error: ")
    return str(lines[0])


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("tether:Agent", "the class Agent, not a tool"),
        ("", "is not MODULE:ATTRIBUTE"),
        ("tether", "is not MODULE:ATTRIBUTE"),
        (":read_order", "is not MODULE:ATTRIBUTE"),
        ("tether:no_such_name", "has no attribute 'no_such_name'"),
        ("tether:__all__", "holds a str, not a tool"),
        ("tether.demo:read_order.spec", "a ToolSpec, not a tool"),
    ],
)
def test_lint_rejects_what_is_not_a_tool_in_one_line(target: str, says: str) -> None:
    line = one_line_error(runner.invoke(app, ["lint", target]))
    assert says in line


def test_lint_prints_the_users_text_as_is(on_path: Path) -> None:
    line = one_line_error(runner.invoke(app, ["lint", "nosuchmodule:x"]))
    assert "cannot load nosuchmodule:x: ModuleNotFoundError" in line
    assert "\u274c" not in line  # ':x:' is not an emoji code here

    line = one_line_error(runner.invoke(app, ["lint", "exploding:TOOLS"]))
    assert "RuntimeError: boom [/] [bold]x[/bold] :x:" in line

    line = one_line_error(runner.invoke(app, ["lint", "no_[bold]such[/]:x"]))
    assert "no_[bold]such[/]:x" in line


def test_lint_prints_one_finding_a_line_when_piped(on_path: Path) -> None:
    result = runner.invoke(app, ["lint", "long_tools:TOOLS"])
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    findings = [line for line in lines if line.startswith(f"{LONG_NAME}: ")]
    assert len(findings) == 3, result.stdout  # thin description, undocumented, free string
    assert any(line.endswith("what it does not do") for line in findings)
    assert any(line.endswith("'order_id' is undocumented") for line in findings)
    assert all(len(line) > 80 for line in findings)
    assert lines[-1] == "1 tool(s), 2 error(s), 1 hint(s)"


def test_lint_accepts_a_tool_a_list_and_a_mapping(on_path: Path) -> None:
    for target in ("tether.demo:read_order", "long_tools:TOOLS"):
        result = runner.invoke(app, ["lint", target])
        assert "1 tool(s)" in result.stdout, result.output
    (on_path / "by_name.py").write_text(
        "from long_tools import TOOLS\nBY_NAME = {t.name: t for t in TOOLS}\n", encoding="utf-8"
    )
    result = runner.invoke(app, ["lint", "by_name:BY_NAME"])
    assert "1 tool(s), 2 error(s)" in result.stdout, result.output


def test_serve_local_rejects_a_port_out_of_range_without_a_traceback() -> None:
    result = runner.invoke(app, ["serve-local", "--port", "99999"])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    assert "--port" in result.stderr and "65535" in result.stderr


def test_help_is_written_for_a_terminal() -> None:
    group = typer.main.get_command(app)
    names = list(group.commands)  # type: ignore[attr-defined]
    assert {"demo", "lint", "serve-local", "redteam"} <= set(names)
    for args in (["--help"], *([name, "--help"] for name in names)):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        for rst in ("``", ":class:", ":func:", ":meth:", ":mod:"):
            assert rst not in result.output, (args, result.output)


def test_demo_events_print_model_text_as_is() -> None:
    call = ToolCall("c1", "lookup", {"q": "[bold]x[/bold] :x:"})
    events = [
        ToolCallStarted(1, call),
        ToolCallFinished(1, call, ToolResult("c1", "price [/] [red]9[/red] :thumbs_up:"), 0.1),
        RunFinished(Outcome("failed", "the model said [/] :x:")),
    ]
    with console.capture() as captured:
        for event in events:
            _print_event(event)
    text = captured.get()
    assert '{"q":"[bold]x[/bold] :x:"}' in text
    assert "price [/] [red]9[/red] :thumbs_up:" in text
    assert "(the model said [/] :x:)" in text


def test_every_command_keeps_a_long_line_whole_when_piped() -> None:
    reason = "the model asked for " + "a very long thing " * 12
    with console.capture() as captured:
        _print_event(RunFinished(Outcome("failed", reason)))
    lines = captured.get().splitlines()
    assert len(lines) == 1 and len(lines[0]) > console.width, lines
