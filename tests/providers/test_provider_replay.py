"""Recording any provider: a fake key in the environment and secrets in headers, echoed back
by the server, never reach the cassette; the cassette replays the same object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from provider_server import FakeProvider, Reply, Seen
from provider_wire import a_message, a_text, c_completion, r_response, r_text
from pydantic import BaseModel

from tether.clients import ChatClient
from tether.providers.anthropic import AnthropicClient
from tether.providers.openai_chat import OpenAIChatClient
from tether.providers.openai_responses import OpenAIResponsesClient
from tether.replay import Cassette, Recorder, Replayer
from tether.structured import extract

ENV_KEY = "sk-fake-ENVKEY-0123456789abcdef"
HEADER_SECRET = "hdr-secret-a1b2c3d4e5f6"


class Seen_(BaseModel):
    headers: str


def _echo(provider: str) -> Any:
    def reply(seen: Seen) -> Reply:
        values = " ".join(f"{k}={v}" for k, v in sorted(seen.headers.items()))
        text = json.dumps({"headers": values})
        if provider == "anthropic":
            return Reply(a_message(a_text(text)))
        if provider == "responses":
            return Reply(r_response(r_text(text)))
        return Reply(c_completion(text))

    return reply


def _client(provider: str, server: FakeProvider) -> ChatClient:
    headers = {"X-Desk-Session": HEADER_SECRET}
    if provider == "anthropic":
        sdk = anthropic.AsyncAnthropic(
            api_key=ENV_KEY, base_url=server.url, default_headers=headers, max_retries=0
        )
        return AnthropicClient("claude-test", sdk=sdk)
    sdk_openai = openai.AsyncOpenAI(
        api_key=ENV_KEY, base_url=server.url, default_headers=headers, max_retries=0
    )
    if provider == "responses":
        return OpenAIResponsesClient("gpt-test", sdk=sdk_openai)
    return OpenAIChatClient("local-test", sdk=sdk_openai)


@pytest.mark.parametrize("provider", ["anthropic", "responses", "chat"])
async def test_no_secret_in_the_cassette_of_any_provider(
    provider: str, server: FakeProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    variable = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
    monkeypatch.setenv(variable, ENV_KEY)
    server.script = _echo(provider)
    recorder = Recorder(secrets=[HEADER_SECRET])
    client = recorder.client(_client(provider, server))
    # an app that leaks the key into its own instructions: redacted too
    result = await extract(client, "Which headers?", Seen_, instructions=f"key={ENV_KEY}")
    assert ENV_KEY in result.output.headers and HEADER_SECRET in result.output.headers
    path = recorder.save(tmp_path / "echo.json")
    text = path.read_text()
    assert ENV_KEY not in text and HEADER_SECRET not in text
    assert "[redacted" in text

    replayer = Replayer(Cassette.load(path), secrets=[HEADER_SECRET])
    replayed = await extract(
        replayer.client(), "Which headers?", Seen_, instructions=f"key={ENV_KEY}"
    )
    replayer.verify()
    assert ENV_KEY not in replayed.output.headers
    assert "[redacted:" in replayed.output.headers and len(server.requests) == 1
