"""The log search tool: a name in one folder, a filter, a page; never a way out."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest

from tether.context.log_search import _matches, log_search_tool
from tether.errors import InvalidArguments, ToolFailure
from tether.limits import Limits
from tether.loop import Agent
from tether.providers.scripted import ScriptedClient, call_reply
from tether.tools import RunContext, count_sentences, lint

CTX: RunContext[None] = RunContext(None)


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    folder.mkdir()
    lines = [f"10:00:{i % 60:02d} {'ERR' if i % 3 == 0 else 'INFO'} req={i}" for i in range(1, 401)]
    (folder / "api.log").write_text("\n".join(lines) + "\n")
    (folder / "small.log").write_text("ok\nERR disk full\nerr lowercase\n")
    (tmp_path / "secret.log").write_text("ERR password=hunter2\n")
    return folder


async def test_returns_numbered_matches_and_pages(logs: Path) -> None:
    t = log_search_tool(logs)
    first = await t.invoke({"file": "api.log", "pattern": "ERR"}, CTX)
    rows = first.splitlines()
    assert rows[0] == "3: 10:00:03 ERR req=3"
    assert len(rows) == 51 and rows[-1] == "[83 more matches: since=50]"
    second = await t.invoke({"file": "api.log", "pattern": "ERR", "since": 50}, CTX)
    assert second.splitlines()[0] == "153: 10:00:33 ERR req=153"
    last = await t.invoke({"file": "api.log", "pattern": "ERR", "since": 100}, CTX)
    assert len(last.splitlines()) == 33 and "more matches" not in last


async def test_pattern_is_case_sensitive_and_literal(logs: Path) -> None:
    t = log_search_tool(logs)
    assert await t.invoke({"file": "small.log", "pattern": "ERR"}, CTX) == "2: ERR disk full"
    assert await t.invoke({"file": "small.log", "pattern": "err"}, CTX) == "3: err lowercase"
    none = await t.invoke({"file": "small.log", "pattern": "E.R"}, CTX)
    assert none == "No line of small.log contains 'E.R'."


@pytest.mark.parametrize(
    "name",
    ["../secret.log", "..", ".", "/etc/passwd", "sub/inner.log", "sub\\inner.log", "a\x00b"],
)
async def test_traversal_and_paths_are_refused(logs: Path, name: str) -> None:
    (logs / "sub").mkdir()
    (logs / "sub" / "inner.log").write_text("ERR inner\n")
    with pytest.raises(ToolFailure, match="is not a file of the log folder"):
        await log_search_tool(logs).invoke({"file": name, "pattern": "ERR"}, CTX)


async def test_absolute_path_inside_the_folder_is_refused_too(logs: Path) -> None:
    with pytest.raises(ToolFailure, match="is not a file of the log folder"):
        await log_search_tool(logs).invoke({"file": str(logs / "api.log"), "pattern": "E"}, CTX)


async def test_symlink_leading_out_is_refused(logs: Path, tmp_path: Path) -> None:
    os.symlink(tmp_path / "secret.log", logs / "escape.log")
    os.symlink(tmp_path, logs / "up")
    t = log_search_tool(logs)
    with pytest.raises(ToolFailure, match="is not a file of the log folder"):
        await t.invoke({"file": "escape.log", "pattern": "ERR"}, CTX)
    with pytest.raises(ToolFailure, match="is not a file of the log folder"):
        await t.invoke({"file": "up", "pattern": "ERR"}, CTX)


async def test_symlink_inside_the_folder_is_followed(logs: Path) -> None:
    os.symlink(logs / "small.log", logs / "current.log")
    result = await log_search_tool(logs).invoke({"file": "current.log", "pattern": "disk"}, CTX)
    assert result == "2: ERR disk full"


async def test_missing_file_lists_the_available_ones(logs: Path) -> None:
    with pytest.raises(ToolFailure, match=r"no file named 'nope.log'.*api\.log, small\.log"):
        await log_search_tool(logs).invoke({"file": "nope.log", "pattern": "ERR"}, CTX)


@pytest.mark.parametrize(
    "arguments",
    [
        {"pattern": "x"},
        {"file": "api.log", "pattern": ""},
        {"file": "api.log", "pattern": "x", "since": -1},
        {"file": "api.log", "pattern": "x", "since": "3"},
        {"file": "api.log", "pattern": "x", "path": "/etc"},
    ],
)
async def test_bad_arguments_name_the_field(logs: Path, arguments: dict[str, object]) -> None:
    with pytest.raises(InvalidArguments):
        await log_search_tool(logs).invoke(arguments, CTX)


def test_description_and_parameters_are_documented(logs: Path) -> None:
    t = log_search_tool(logs)
    assert count_sentences(t.spec.description) >= 3
    assert [f for f in lint([t]) if f.severity == "error"] == []
    assert t.spec.parameters["required"] == ["file", "pattern"]


def test_file_is_streamed_line_by_line(logs: Path) -> None:
    lines = _matches(logs / "api.log", "ERR")
    assert inspect.isgenerator(lines)
    assert next(lines) == "3: 10:00:03 ERR req=3"
    lines.close()


async def test_a_refused_path_reaches_the_model_as_an_error_result(logs: Path) -> None:
    client = ScriptedClient(
        [call_reply(("search_log", {"file": "../secret.log", "pattern": "ERR"})), "done"]
    )
    result = await Agent(client, [log_search_tool(logs)], limits=Limits(max_turns=3)).run("go")
    tool_result = result.transcript[2].tool_results[0]
    assert tool_result.is_error and "not a file of the log folder" in tool_result.content
    assert "hunter2" not in tool_result.content and result.outcome.completed
