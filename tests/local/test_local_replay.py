"""A run recorded against the local OpenAI-compatible server (the embedded model behind the
real OpenAI SDK) replays identically with no server; a changed tool fails the replay with
a diff naming the turn and the call; the fake key and header never reach the cassette."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import openai
import pytest
from typer.testing import CliRunner

import tether.demo
from tether.cli import app
from tether.demo import Order, demo_agent
from tether.errors import ReplayDivergence
from tether.providers.local_server import running_server
from tether.providers.openai_chat import OpenAIChatClient
from tether.providers.scripted import ScriptedClient
from tether.replay import Cassette, Recorder, Replayer

FAKE_KEY = "sk-test-FAKE0123456789abcdefKEY"
HEADER_SECRET = "desk-session-5f4e3d2c1b0a"
PROMPT = "Ou en est ma commande C-1042 ?"


async def _record(path: Path) -> Any:
    async with running_server() as base_url:
        sdk = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=FAKE_KEY,
            default_headers={"X-Desk-Session": HEADER_SECRET},
            http_client=openai.DefaultAsyncHttpxClient(trust_env=False),
            max_retries=0,
        )
        recorder = Recorder(secrets=[HEADER_SECRET])
        agent = recorder.instrument(demo_agent(OpenAIChatClient("local", sdk=sdk)))
        result = await agent.run(PROMPT)
        recorder.finish(result)
        recorder.save(path)
        await sdk.close()
    return result


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    path = tmp_path_factory.mktemp("cassettes") / "local_order.json"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENAI_API_KEY", FAKE_KEY)
        result = asyncio.run(_record(path))
    return path, result


def test_the_recorded_run_called_the_tool(recorded: tuple[Path, Any]) -> None:
    path, result = recorded
    assert result.outcome.kind == "completed"
    calls = [c for m in result.transcript for c in m.tool_calls]
    assert [c.name for c in calls] == ["lire_commande"]
    kinds = [i["type"] for i in Cassette.load(path).interactions]
    assert kinds == ["request", "response", "tool", "request", "response"]


async def test_it_replays_identically_with_no_server(recorded: tuple[Path, Any]) -> None:
    path, original = recorded
    replayer = Replayer(Cassette.load(path))
    # the inner client is never called: the server is gone and a script would be empty
    agent = replayer.instrument(demo_agent(ScriptedClient([])))
    result = await agent.run(PROMPT)
    replayer.verify(result)
    assert result.transcript == original.transcript
    assert result.usage == original.usage and result.outcome == original.outcome


def test_tether_replay_prints_the_trace(recorded: tuple[Path, Any]) -> None:
    path, original = recorded
    out = CliRunner().invoke(app, ["replay", str(path)])
    assert out.exit_code == 0, out.output
    assert "call lire_commande" in out.output and "outcome: completed" in out.output
    assert "replayed 2 request(s): identical to the recording" in out.output
    assert original.output.split()[0] in out.output


async def test_a_changed_tool_fails_the_replay_naming_turn_and_call(
    recorded: tuple[Path, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, original = recorded
    call = next(c for m in original.transcript for c in m.tool_calls)
    monkeypatch.setitem(tether.demo.ORDERS, "C-1042", Order("C-1042", "perdue", 89.9))
    replayer = Replayer(Cassette.load(path))
    result = await replayer.instrument(demo_agent(ScriptedClient([]))).run(PROMPT)
    with pytest.raises(ReplayDivergence) as caught:
        replayer.verify(result)
    assert caught.value.where == f"turn 1, call {call.id} (lire_commande): the result"
    assert caught.value.turn == 1 and caught.value.call == call.id
    removed = [line for line in caught.value.diff.splitlines() if line.startswith("-  ")]
    added = [line for line in caught.value.diff.splitlines() if line.startswith("+  ")]
    assert len(removed) == len(added) == 1
    assert '\\"statut\\":\\"expediee\\"' in removed[0]
    assert '\\"statut\\":\\"perdue\\"' in added[0]


def test_no_secret_reaches_the_cassette(recorded: tuple[Path, Any]) -> None:
    text = recorded[0].read_text()
    assert FAKE_KEY not in text and HEADER_SECRET not in text
    assert "sk-test" not in text and "Bearer" not in text
