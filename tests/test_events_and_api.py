"""Events, the public face, the wrapper form of the loop, the demo and the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tether
from tether.cli import app
from tether.clients import ChatOptions, ClientPipeline, DelegatingChatClient, TextDelta
from tether.errors import RunNotCompleted
from tether.events import (
    Event,
    MessageAppended,
    ModelRequest,
    ModelResponse,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message
from tether.providers.scripted import ScriptedClient, call_reply
from tether.tool_loop_client import ToolLoopChatClient
from tether.tools import FunctionTool

ORDER = ("lire_commande", {"numero": "C-1042"})


async def test_event_stream_in_order(tools: list[FunctionTool]) -> None:
    events: list[Event] = []
    agent = Agent(ScriptedClient([call_reply(ORDER), "done"]), tools, listeners=[events.append])
    await agent.run("q")
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "RunStarted",
        "ModelRequest",
        "ModelResponse",
        "MessageAppended",
        "ToolCallStarted",
        "ToolCallFinished",
        "MessageAppended",
        "ModelRequest",
        "ModelResponse",
        "MessageAppended",
        "RunFinished",
    ]
    assert isinstance(events[0], RunStarted)
    assert isinstance(events[1], ModelRequest) and events[1].turn == 1
    assert isinstance(events[2], ModelResponse)
    assert isinstance(events[3], MessageAppended)
    started, finished = events[4], events[5]
    assert isinstance(started, ToolCallStarted) and started.call.name == "lire_commande"
    assert isinstance(finished, ToolCallFinished) and not finished.result.is_error
    assert finished.seconds >= 0
    last = events[-1]
    assert isinstance(last, RunFinished) and last.outcome.kind == "completed"


async def test_streaming_emits_text_deltas(tools: list[FunctionTool]) -> None:
    events: list[Event] = []
    agent = Agent(
        ScriptedClient(["streamed answer"]), tools, listeners=[events.append], stream=True
    )
    result = await agent.run("q")
    assert result.output == "streamed answer"
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["streamed answer"]


def test_public_face_is_pinned_and_import_is_light() -> None:
    assert sorted(tether.__all__) == tether.__all__
    for name in tether.__all__:
        assert getattr(tether, name) is not None
    with pytest.raises(AttributeError):
        _ = tether.not_a_name  # type: ignore[attr-defined]
    heavy = "('pydantic', 'typer', 'anthropic', 'openai', 'xllamacpp', 'llguidance')"
    code = f"import sys, tether; print(sorted(m for m in {heavy} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


async def test_tool_loop_client_returns_new_messages(tools: list[FunctionTool]) -> None:
    wrapped = ToolLoopChatClient(ScriptedClient([call_reply(ORDER), "done"]), tools)
    history = [Message.user("q")]
    response = await wrapped.complete(history, [], ChatOptions())
    assert [m.role for m in response.messages] == ["assistant", "tool", "assistant"]
    assert response.message.text == "done"
    assert response.usage.requests == 2


async def test_tool_loop_client_reports_cap_hits(tools: list[FunctionTool]) -> None:
    inner = ScriptedClient(lambda _: call_reply(ORDER))
    wrapped = ToolLoopChatClient(inner, tools, limits=Limits(max_turns=3))
    with pytest.raises(RunNotCompleted, match="turn_cap") as info:
        await wrapped.complete([Message.user("q")], [], ChatOptions())
    assert info.value.result.outcome.kind == "turn_cap"
    assert all(r.tools for r in inner.requests)  # never a forced tool-less request


async def test_pipeline_applies_wrappers_outermost_first() -> None:
    order: list[str] = []

    class Tag(DelegatingChatClient):
        def __init__(self, inner: object, name: str) -> None:
            super().__init__(inner)  # type: ignore[arg-type]
            self.name = name

        async def complete(self, messages, tools, options):  # type: ignore[no-untyped-def]
            order.append(self.name)
            return await self.inner.complete(messages, tools, options)

    client = (
        ClientPipeline(ScriptedClient(["x"])).use(Tag, name="outer").use(Tag, name="inner").build()
    )
    await client.complete([Message.user("q")], [], ChatOptions())
    assert order == ["outer", "inner"]


def test_cli_demo_and_lint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["demo", "--scripted"])
    assert result.exit_code == 0, result.output
    assert "lire_commande" in result.output and "outcome: completed" in result.output
    result = runner.invoke(app, ["lint", "tether.demo:read_order"])
    assert result.exit_code == 0 and "0 error(s)" in result.output
    source = (
        'from tether import tool\n\n@tool\ndef thin(a: str) -> str:\n    """Thin."""\n'
        "    return a\n"
    )
    (tmp_path / "thin_tools.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = runner.invoke(app, ["lint", "thin_tools:thin"])
    assert result.exit_code == 1, result.output
    assert "'a' is undocumented" in result.output and "2 error(s)" in result.output
    result = runner.invoke(app, ["lint", "no.such.module:x"])
    assert result.exit_code == 2 and "cannot load" in result.output


def test_cli_redteam_reports_zero_effects() -> None:
    result = CliRunner().invoke(app, ["redteam"])
    assert result.exit_code == 0, result.output
    assert "[PASS] seed_ticket" in result.output
    assert "[FAIL]" not in result.output
