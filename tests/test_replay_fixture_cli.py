"""``tether replay FILE`` checks cassettes made by the pytest fixture's ``client()`` and
``tools()`` as it checks those of ``Recorder.instrument()``: a hand-edited tool result or
reply exits 1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tether import Agent, ScriptedClient
from tether.cli import app
from tether.demo import demo_script, read_order
from tether.replay.pytest_plugin import CassetteFixture


def record(path: Path) -> None:
    asyncio.run(_record(path))


async def _record(path: Path) -> None:
    cassette = CassetteFixture(path, recording=True, key=None)
    client = cassette.client(lambda: ScriptedClient(demo_script))
    agent = Agent(client, cassette.tools([read_order]), instructions="Be brief.")
    result = await agent.run("Ou en est ma commande C-1042 ?")
    assert result.outcome.completed
    cassette.finish(result)


def edit_tool_result(document: dict[str, Any]) -> None:
    tool = next(i for i in document["interactions"] if i["type"] == "tool")
    tool["result"] = tool["result"].replace("expediee", "remboursee")


def edit_reply(document: dict[str, Any]) -> None:
    last = [i for i in document["interactions"] if i["type"] == "response"][-1]
    last["response"]["messages"][0]["parts"][0]["text"] = "Votre commande est remboursee."


def edit_unmarked(document: dict[str, Any]) -> None:
    document["meta"].pop("kind", None)  # cassettes recorded before the fixture marked them
    edit_reply(document)


def test_an_unedited_fixture_cassette_replays(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    record(path)
    out = CliRunner().invoke(app, ["replay", str(path)])
    assert out.exit_code == 0, out.output
    assert "identical to the recording" in out.output


@pytest.mark.parametrize("edit", [edit_tool_result, edit_reply, edit_unmarked])
def test_an_edited_fixture_cassette_exits_1(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None]
) -> None:
    path = tmp_path / "run.json"
    record(path)
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))
    out = CliRunner().invoke(app, ["replay", str(path)])
    assert out.exit_code == 1, out.output
    assert "diverged" in out.output or "edited" in out.output
