"""Model selection by one string."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from provider_server import FakeProvider, Reply
from provider_wire import a_message, a_text

from tether.clients import ChatOptions
from tether.errors import ConfigError
from tether.messages import Message
from tether.providers import registry
from tether.providers.anthropic import AnthropicClient
from tether.providers.openai_chat import OpenAIChatClient
from tether.providers.openai_responses import OpenAIResponsesClient
from tether.providers.registry import PROVIDERS, client_from_string, parse_spec, register
from tether.providers.scripted import ScriptedClient


@pytest.fixture
def restore_registry() -> Iterator[None]:
    saved = dict(PROVIDERS)
    yield
    PROVIDERS.clear()
    PROVIDERS.update(saved)


def test_parse_spec() -> None:
    assert parse_spec("anthropic:claude-x") == ("anthropic", "claude-x", None)
    assert parse_spec("openai-chat:qwen3:8b@http://127.0.0.1:11434/v1") == (
        "openai-chat",
        "qwen3:8b",
        "http://127.0.0.1:11434/v1",
    )
    assert parse_spec("local") == ("local", "", None)


def test_builtins_are_registered_like_plugins() -> None:
    assert {"anthropic", "openai", "openai-chat", "local"} <= set(PROVIDERS)


def test_each_prefix_builds_its_client() -> None:
    env = {"ANTHROPIC_API_KEY": "a", "OPENAI_API_KEY": "o"}
    a = client_from_string("anthropic:claude-x", env)
    assert isinstance(a, AnthropicClient) and a.model == "claude-x"
    o = client_from_string("openai:gpt-x", {**env, "OPENAI_BASE_URL": "http://127.0.0.1:1/v1"})
    assert isinstance(o, OpenAIResponsesClient) and str(o.sdk.base_url).startswith(
        "http://127.0.0.1:1"
    )
    c = client_from_string("openai-chat:qwen3:8b@http://127.0.0.1:11434/v1", {})
    assert isinstance(c, OpenAIChatClient) and c.model == "qwen3:8b"
    assert str(c.sdk.base_url) == "http://127.0.0.1:11434/v1/"
    d = client_from_string(None, {**env, "TETHER_MODEL": "anthropic:claude-y"})
    assert isinstance(d, AnthropicClient) and d.model == "claude-y"


@pytest.mark.parametrize(
    ("spec", "env", "message"),
    [
        ("anthropic:claude-x", {}, "set ANTHROPIC_API_KEY"),
        ("openai:gpt-x", {}, "set OPENAI_API_KEY"),
        ("openai-chat:m", {}, "openai-chat:MODEL@URL"),
        ("anthropic", {"ANTHROPIC_API_KEY": "a"}, "anthropic:MODEL"),
        ("gemini:pro", {}, "unknown model provider 'gemini'"),
        (None, {}, "set TETHER_MODEL"),
    ],
)
def test_config_errors_are_one_clear_line(
    spec: str | None, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as caught:
        client_from_string(spec, env)
    assert "\n" not in str(caught.value)


def test_missing_local_model_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tether.providers.local", None)  # import now fails
    with pytest.raises(ConfigError, match="local model is not installed"):
        client_from_string("local", {})


def test_plugins_register_and_duplicates_are_refused(restore_registry: None) -> None:
    def factory(model: str, url: str | None, env: Any) -> ScriptedClient:
        return ScriptedClient([f"{model}@{url}"])

    register("fake", factory)
    client = client_from_string("fake:m1@u", {})
    assert isinstance(client, ScriptedClient)
    with pytest.raises(ConfigError, match="already registered"):
        register("fake", factory)
    register("fake", factory, replace=True)
    assert "fake" in registry.PROVIDERS


async def test_a_resolved_client_talks_to_its_server(server: FakeProvider) -> None:
    server.script = [Reply(a_message(a_text("hi")))]
    client = client_from_string(
        f"anthropic:claude-x@{server.url}", {"ANTHROPIC_API_KEY": "sk-from-env"}
    )
    reply = await client.complete([Message.user("q")], [], ChatOptions())
    assert reply.message.text == "hi"
    assert isinstance(client, AnthropicClient)
    await client.aclose()
    headers = server.requests[0].headers
    assert "sk-from-env" in (headers.get("x-api-key", "") + headers.get("authorization", ""))


def test_local_spec_gives_a_client_that_can_call_tools() -> None:
    from tether.constrained import ConstrainedToolCalling

    client = client_from_string("local", {})
    assert isinstance(client, ConstrainedToolCalling)
