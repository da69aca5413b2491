"""Choose a model with one string; providers register by name, built-ins included.

::

    client_from_string("anthropic:claude-opus-5-5")
    client_from_string("openai:gpt-5")
    client_from_string("openai-chat:qwen3:8b@http://127.0.0.1:11434/v1")
    client_from_string("local")
    client_from_string()          # the TETHER_MODEL environment variable

A spec is ``PROVIDER[:MODEL][@URL]``. A factory receives the model (may be empty), the
URL (or ``None``) and the environment mapping, and returns a client; nothing is imported
or read until a spec is resolved. Keys come from ``ANTHROPIC_API_KEY`` and
``OPENAI_API_KEY``; ``OPENAI_BASE_URL`` points ``openai:`` and ``openai-chat:`` elsewhere.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from tether.clients import ChatClient
from tether.errors import ConfigError

Factory: TypeAlias = Callable[[str, "str | None", Mapping[str, str]], ChatClient]
"""``factory(model, url, environ) -> client``."""

PROVIDERS: dict[str, Factory] = {}
"""The registry: provider prefix -> factory. Built-ins register here like plugins."""

LOCAL_CLIENT = "tether.providers.local:demo_client"
"""The embedded model wrapped in constrained tool calling (a bare model cannot call tools)."""


def register(name: str, factory: Factory, *, replace: bool = False) -> None:
    """Make ``name:MODEL`` resolve through ``factory``."""
    if name in PROVIDERS and not replace:
        raise ConfigError(f"a provider named {name!r} is already registered")
    PROVIDERS[name] = factory


def parse_spec(spec: str) -> tuple[str, str, str | None]:
    """Split ``PROVIDER[:MODEL][@URL]`` into its three pieces (URL may be ``None``)."""
    head, at, url = spec.strip().partition("@")
    provider, _, model = head.partition(":")
    return provider.strip(), model.strip(), (url.strip() or None) if at else None


def client_from_string(
    spec: str | None = None, environ: Mapping[str, str] | None = None
) -> ChatClient:
    """The client for ``spec`` (default: ``$TETHER_MODEL``); raises :class:`ConfigError`."""
    env = os.environ if environ is None else environ
    spec = spec if spec is not None else env.get("TETHER_MODEL")
    if not spec or not spec.strip():
        raise ConfigError(
            "no model chosen: pass a spec such as 'anthropic:MODEL' or set TETHER_MODEL"
        )
    provider, model, url = parse_spec(spec)
    factory = PROVIDERS.get(provider)
    if factory is None:
        known = ", ".join(sorted(PROVIDERS))
        raise ConfigError(f"unknown model provider {provider!r} in {spec!r}; use one of: {known}")
    return factory(model, url, env)


# --- built-ins ----------------------------------------------------------------------------


def _need_model(provider: str, model: str) -> str:
    if not model:
        raise ConfigError(f"no model named: write '{provider}:MODEL'")
    return model


def _need_key(provider: str, variable: str, env: Mapping[str, str]) -> str:
    key = env.get(variable, "").strip()
    if not key:
        raise ConfigError(f"the {provider} provider needs an API key: set {variable}")
    return key


def _anthropic(model: str, url: str | None, env: Mapping[str, str]) -> ChatClient:
    from tether.providers.anthropic import AnthropicClient

    key = _need_key("anthropic", "ANTHROPIC_API_KEY", env)
    base = url or env.get("ANTHROPIC_BASE_URL") or None
    return AnthropicClient(_need_model("anthropic", model), api_key=key, base_url=base)


def _openai(model: str, url: str | None, env: Mapping[str, str]) -> ChatClient:
    from tether.providers.openai_responses import OpenAIResponsesClient

    key = _need_key("openai", "OPENAI_API_KEY", env)
    base = url or env.get("OPENAI_BASE_URL") or None
    return OpenAIResponsesClient(_need_model("openai", model), api_key=key, base_url=base)


def _openai_chat(model: str, url: str | None, env: Mapping[str, str]) -> ChatClient:
    from tether.providers.openai_chat import OpenAIChatClient

    base = url or env.get("OPENAI_BASE_URL") or None
    if base is None:
        raise ConfigError(
            "the openai-chat provider needs a server URL: write 'openai-chat:MODEL@URL' "
            "or set OPENAI_BASE_URL"
        )
    key = env.get("OPENAI_API_KEY") or None
    return OpenAIChatClient(_need_model("openai-chat", model), base_url=base, api_key=key)


def _local(model: str, url: str | None, env: Mapping[str, str]) -> ChatClient:
    module_name, _, attribute = LOCAL_CLIENT.partition(":")
    try:
        cls: Any = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"the local model is not installed ({exc}); "
            "install tether's local extra: uv add 'tether[local]' (docs/local-model.md)"
        ) from exc
    client: ChatClient = cls(model) if model else cls()
    return client


register("anthropic", _anthropic)
register("openai", _openai)
register("openai-chat", _openai_chat)
register("local", _local)
