"""Record and replay with scripted models: identical replays, divergences named with a diff."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field

from tether.errors import ConfigError, ReplayDivergence, ToolFailure
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message
from tether.providers.faults import FaultyClient
from tether.providers.scripted import ScriptedClient, call_reply, json_reply, text_reply
from tether.replay import Cassette, Recorder, Redactor, Replayer, replay_agent_run
from tether.tools import DelegatingTool, Tool, tool
from tether.workflows import Workflow, run_workflow

STATUS = {"C-1042": "expediee"}
INSTRUCTIONS = "You are a support agent."
PROMPT = "Ou en est ma commande C-1042 ?"


@tool(name="lire_commande", thread=False)
def read_order(numero: Annotated[str, Field(description="Order number.")]) -> dict[str, str]:
    """Read an order's status. Use it for order questions. It changes nothing."""
    if numero not in STATUS:
        raise ToolFailure(f"No order {numero}.")
    return {"numero": numero, "statut": STATUS[numero]}


def script() -> list[Any]:
    return [
        call_reply(("lire_commande", {"numero": "C-1042"}), text="Je regarde."),
        call_reply(("lire_commande", {"numero": "C-9999"})),
        text_reply("Votre commande est expediee."),
    ]


def agent(client: Any, tools: list[Tool] | None = None, **kwargs: Any) -> Agent[None]:
    kwargs.setdefault("instructions", INSTRUCTIONS)
    return Agent(client, tools if tools is not None else [read_order], **kwargs)


async def record(tmp_path: Path, replies: list[Any] | None = None) -> tuple[Path, Any]:
    recorder = Recorder(environ={})
    run = recorder.instrument(agent(ScriptedClient(replies or script())))
    result = await run.run(PROMPT)
    recorder.finish(result)
    return recorder.save(tmp_path / "run.json"), result


async def replay(path: Path, **kwargs: Any) -> tuple[Any, Replayer]:
    replayer = Replayer(Cassette.load(path), environ={}, stub_tools=kwargs.pop("stub", False))
    prompt = kwargs.pop("prompt", PROMPT)
    run = replayer.instrument(agent(ScriptedClient([]), **kwargs))
    return await run.run(prompt), replayer


async def test_a_recorded_run_replays_identically(tmp_path: Path) -> None:
    path, recorded = await record(tmp_path)
    assert recorded.outcome.kind == "completed"
    result, replayer = await replay(path)
    replayer.verify(result)
    assert result.transcript == recorded.transcript and result.usage == recorded.usage
    document = json.loads(path.read_text())
    kinds = [i["type"] for i in document["interactions"]]
    assert kinds == [*["request", "response", "tool"] * 2, "request", "response"]
    second = document["interactions"][3]
    assert second["keep"] == 1 and [m["role"] for m in second["new"]] == ["assistant", "tool"]
    assert "tools" not in second and "options" not in second  # unchanged: not repeated
    assert document["interactions"][2]["result"] == '{"numero":"C-1042","statut":"expediee"}'
    assert document["interactions"][5]["raised"] == "ToolFailure"


async def test_changing_a_tool_fails_with_a_diff_naming_turn_and_call(tmp_path: Path) -> None:
    path, _ = await record(tmp_path)
    STATUS["C-1042"] = "perdue"
    try:
        result, replayer = await replay(path)
    finally:
        STATUS["C-1042"] = "expediee"
    with pytest.raises(ReplayDivergence) as caught:
        replayer.verify(result)
    err = caught.value
    assert (err.turn, err.call) == (1, "call_1")
    assert err.where == "turn 1, call call_1 (lire_commande): the result"
    assert '-  "result": "{\\"numero\\":\\"C-1042\\",\\"statut\\":\\"expediee\\"}"' in err.diff
    assert '+  "result": "{\\"numero\\":\\"C-1042\\",\\"statut\\":\\"perdue\\"}"' in err.diff
    assert err.diff.startswith("--- recorded\n+++ replay")


async def test_stubbed_tools_replay_without_running(tmp_path: Path) -> None:
    path, recorded = await record(tmp_path)

    class MustNotRun(DelegatingTool):
        async def invoke(self, arguments: Any, ctx: Any) -> str:
            raise AssertionError("the tool ran")

    result, replayer = await replay(path, tools=[MustNotRun(read_order)], stub=True)
    replayer.verify(result)
    assert result.transcript == recorded.transcript


async def test_the_cassette_alone_replays_an_agent_run(tmp_path: Path) -> None:
    path, recorded = await record(tmp_path)
    result, replayer = await replay_agent_run(Cassette.load(path))
    replayer.verify(result)
    assert result.transcript == recorded.transcript


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"instructions": "Be rude."}, "turn 1: the request's instructions"),
        ({"prompt": "Ou est C-2210 ?"}, "turn 1: message 1 of the history (user)"),
        ({"tools": []}, "turn 1: the tools offered"),
    ],
)
async def test_a_changed_request_is_named(
    tmp_path: Path, change: dict[str, Any], where: str
) -> None:
    path, _ = await record(tmp_path)
    result, replayer = await replay(path, **change)
    assert result.outcome.kind == "failed"  # the loop saw the client fail
    with pytest.raises(ReplayDivergence) as caught:
        replayer.verify(result)
    assert caught.value.where == where and caught.value.turn == 1
    assert "--- recorded" in caught.value.diff


async def test_a_shorter_run_and_an_edited_cassette_are_divergences(tmp_path: Path) -> None:
    path, _ = await record(tmp_path)
    result, replayer = await replay(path, limits=Limits(max_turns=1))
    with pytest.raises(ReplayDivergence, match="made 1 model request"):
        replayer.verify(result)

    document = json.loads(path.read_text())
    document["interactions"][0]["digest"] = "sha256:" + "0" * 64
    path.write_text(json.dumps(document))
    result, replayer = await replay(path)
    with pytest.raises(ReplayDivergence, match="the cassette was edited"):
        replayer.verify(result)


async def test_a_different_outcome_is_reported(tmp_path: Path) -> None:
    path, _ = await record(tmp_path)
    cassette = Cassette.load(path)
    assert cassette.outcome is not None
    cassette.outcome["kind"] = "turn_cap"
    replayer = Replayer(cassette, environ={})
    result = await replayer.instrument(agent(ScriptedClient([]))).run(PROMPT)
    with pytest.raises(ReplayDivergence, match="the outcome"):
        replayer.verify(result)


async def test_provider_failures_are_recorded_and_replayed(tmp_path: Path) -> None:
    recorder = Recorder(environ={})
    client = FaultyClient(ScriptedClient(script()), {2: "rate_limit"})
    recorded = await recorder.instrument(agent(client)).run(PROMPT)
    assert (recorded.outcome.kind, recorded.outcome.error) == ("failed", "rate_limit")
    recorder.finish(recorded)
    path = recorder.save(tmp_path / "fail.json")
    result, replayer = await replay(path)
    replayer.verify(result)
    assert (result.outcome.kind, result.outcome.error) == ("failed", "rate_limit")


def test_bad_cassettes_are_config_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    for text, match in [
        ("{", "not JSON"),
        ("{}", "not a tether cassette"),
        ('{"format": "tether-cassette", "version": 9}', "version 9"),
        ('{"format": "tether-cassette", "version": 1, "interactions": [1]}', "malformed"),
    ]:
        bad.write_text(text)
        with pytest.raises(ConfigError, match=match):
            Cassette.load(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        Cassette.load(tmp_path / "missing.json")


# --- workflows --------------------------------------------------------------------------------


async def order_workflow(wf: Workflow, order: str) -> str:
    kind = await wf.extract("Ou est mon colis ?", str)
    found = await wf.call(read_order, numero=order)
    return f"{kind}: {found['statut']}"


async def test_a_workflow_replays_and_names_a_changed_argument(tmp_path: Path) -> None:
    recorder = Recorder(environ={})
    client = recorder.client(ScriptedClient([json_reply({"value": "suivi"})]))
    recorded = await run_workflow(client, partial(order_workflow, order="C-1042"), tape=recorder)
    assert recorded.output == "suivi: expediee"
    recorder.finish(recorded)
    path = recorder.save(tmp_path / "wf.json")

    replayer = Replayer(Cassette.load(path), environ={})
    body = partial(order_workflow, order="C-1042")
    result = await run_workflow(replayer.client(), body, tape=replayer)
    replayer.verify(result)
    assert result.output == recorded.output

    replayer = Replayer(Cassette.load(path), environ={})
    body = partial(order_workflow, order="C-9999")
    result = await run_workflow(replayer.client(), body, tape=replayer)
    assert result.outcome.kind == "failed"
    with pytest.raises(ReplayDivergence) as caught:
        replayer.verify(result)
    assert caught.value.where == "turn 1, call step_2 (lire_commande), argument 'numero'"
    assert '-  "numero": "C-1042"' in caught.value.diff
    assert '+  "numero": "C-9999"' in caught.value.diff


# --- redaction --------------------------------------------------------------------------------


def test_the_redactor_removes_keys_tokens_and_marked_values() -> None:
    redactor = Redactor(
        ["customer-4242"],
        environ={"OPENAI_API_KEY": "sk-fake-0123456789abcdef", "HOME": "/home/user", "X": "sh"},
    )
    value = {
        "text": "key sk-fake-0123456789abcdef and customer-4242 at /home/user",
        "headers": {"Authorization": "Bearer abcdefghijkl", "x-api-key": "k", "accept": "json"},
        "note": "curl -H 'Authorization: Bearer eyJhbGciOi.payload.sig' ?api_key=abcd1234",
        "other": ["sk-proj-ABCDEFGHIJKLMNOPQRSTUV", {"refresh_token": "r"}],
        "max_tokens": 5,
    }
    clean = redactor.value(value)
    text = json.dumps(clean)
    for secret in ("sk-fake", "customer-4242", "abcdefghijkl", "eyJhbGciOi", "abcd1234", "sk-proj"):
        assert secret not in text
    assert clean["text"] == "key [redacted:OPENAI_API_KEY] and [redacted] at /home/user"
    assert clean["headers"] == {
        "Authorization": "[redacted]",
        "x-api-key": "[redacted]",
        "accept": "json",
    }
    assert clean["max_tokens"] == 5 and clean["other"][1] == {"refresh_token": "[redacted]"}
    assert redactor.value(clean) == clean  # idempotent: digests match on replay
    with pytest.raises(ConfigError):
        Redactor(["abc"])


async def test_marked_secrets_never_reach_the_file_and_the_replay_still_matches(
    tmp_path: Path,
) -> None:
    secret = "tok-customer-777"

    @tool(name="lire_commande", thread=False)
    def leaky(numero: str) -> str:
        """Returns a secret. Used to test redaction. Nothing else."""
        return f"order {numero}, session {secret}"

    replies = [
        call_reply(("lire_commande", {"numero": secret})),
        text_reply(f"Your session is {secret}."),
    ]
    recorder = Recorder(secrets=[secret], environ={})
    run = recorder.instrument(agent(ScriptedClient(replies), [leaky]))
    result = await run.run(Message.user(f"My token is {secret}").text)
    recorder.finish(result)
    path = recorder.save(tmp_path / "secret.json")
    assert secret not in path.read_text() and "[redacted]" in path.read_text()

    replayer = Replayer(Cassette.load(path), secrets=[secret], environ={})
    replayed = await replayer.instrument(agent(ScriptedClient([]), [leaky])).run(
        f"My token is {secret}"
    )
    replayer.verify()
    assert replayed.outcome.kind == "completed"


# --- the command line -------------------------------------------------------------------------


def test_tether_replay_reports_bad_and_edited_cassettes(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tether.cli import app

    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    out = CliRunner().invoke(app, ["replay", str(bad)])
    assert out.exit_code == 2 and "is not a tether cassette" in out.output


def test_tether_replay_runs_agent_cassettes_and_prints_workflow_ones(tmp_path: Path) -> None:
    import asyncio

    from typer.testing import CliRunner

    from tether.cli import app

    path, _ = asyncio.run(record(tmp_path))
    out = CliRunner().invoke(app, ["replay", str(path)])
    assert out.exit_code == 0, out.output
    assert "call lire_commande" in out.output and "No order C-9999." in out.output
    assert "answer: Votre commande est expediee." in out.output

    document = json.loads(path.read_text())
    document["interactions"][3]["new"][0]["parts"][0]["text"] = "edited"
    path.write_text(json.dumps(document))
    out = CliRunner().invoke(app, ["replay", str(path)])
    assert out.exit_code == 1 and "the cassette was edited" in out.output

    recorder = Recorder(environ={})
    client = recorder.client(ScriptedClient([json_reply({"value": "suivi"})]))
    body = partial(order_workflow, order="C-1042")
    result = asyncio.run(run_workflow(client, body, tape=recorder))
    recorder.finish(result)
    wf_path = recorder.save(tmp_path / "wf.json")
    out = CliRunner().invoke(app, ["replay", str(wf_path)])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == "turn 1: request (1 new message(s))"
    assert 'reply: {"value":"suivi"}' in lines[1]
    assert "result lire_commande [step_2]" in out.output
    assert lines[-1] == "outcome: completed (the workflow returned)"
