"""Server-side context management on Anthropic: context editing and compaction.

Anthropic can clear old tool results (``clear_tool_uses_20250919``, beta
``context-management-2025-06-27``) or compact the conversation (``compact_20260112``, beta
``compact-2026-01-12``) on the server. Both are asked for with one body field::

    ChatOptions(extra={"context_management": {"edits": [edit]}})

which the Anthropic adapter passes through (``ChatOptions.extra`` is merged into the
body). The beta header must be on the SDK client given to the adapter::

    sdk = anthropic.AsyncAnthropic(default_headers={"anthropic-beta": CONTEXT_EDITING_BETA})
    client = AnthropicClient(model, sdk=sdk)

Context editing keeps the history client-side, so nothing more is needed. Compaction
returns a ``compaction`` block that must be sent back verbatim in the next requests; an
adapter that does this (tether's Anthropic adapter does) says so with
``round_trips_compaction = True``. This module only
builds options and checks the adapter; it imports no SDK.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tether.clients import ChatClient, ChatOptions
from tether.errors import ConfigError

__all__ = [
    "COMPACTION_BETA",
    "CONTEXT_EDITING_BETA",
    "anthropic_adapter",
    "clear_tool_uses_edit",
    "compact_edit",
    "require_server_side",
    "with_edit",
]

CONTEXT_EDITING_BETA = "context-management-2025-06-27"
COMPACTION_BETA = "compact-2026-01-12"
_ADAPTER_MODULE = "tether.providers.anthropic"


def anthropic_adapter(client: ChatClient) -> Any | None:
    """The Anthropic adapter at the bottom of a chain of wrappers, or ``None``."""
    seen: set[int] = set()
    node: Any = client
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        if type(node).__module__ == _ADAPTER_MODULE:
            return node
        node = getattr(node, "inner", None)
    return None


def _betas(adapter: Any) -> set[str]:
    sdk = getattr(adapter, "sdk", None)
    headers: Mapping[str, Any] = getattr(sdk, "default_headers", None) or {}
    value = headers.get("anthropic-beta") or headers.get("Anthropic-Beta") or ""
    return {b.strip() for b in str(value).split(",") if b.strip()}


def require_server_side(client: ChatClient, beta: str, *, compaction: bool = False) -> None:
    """Raise :class:`ConfigError` unless ``client`` ends in an Anthropic adapter that can
    carry the ``beta`` feature (and, for compaction, sends compaction blocks back)."""
    adapter = anthropic_adapter(client)
    if adapter is None:
        raise ConfigError(
            "server-side context management needs the Anthropic adapter as the inner "
            "client; use the client-side policy (server_side=False) with other providers"
        )
    if beta not in _betas(adapter):
        raise ConfigError(
            f"the Anthropic SDK client has no 'anthropic-beta: {beta}' header; build it with "
            f"anthropic.AsyncAnthropic(default_headers={{'anthropic-beta': '{beta}'}}) "
            "and pass it to AnthropicClient(sdk=...)"
        )
    if compaction and not getattr(adapter, "round_trips_compaction", False):
        raise ConfigError(
            "this Anthropic adapter does not send compaction blocks back, so server-side "
            "compaction would summarise again on every request; use server_side=False"
        )


def _tokens(value: int) -> dict[str, Any]:
    return {"type": "input_tokens", "value": value}


def clear_tool_uses_edit(
    *,
    trigger_tokens: int,
    keep: int,
    clear_at_least: int | None = None,
    exclude_tools: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The ``clear_tool_uses_20250919`` edit: clear all but ``keep`` tool results once the
    input passes ``trigger_tokens``, at least ``clear_at_least`` tokens at a time."""
    edit: dict[str, Any] = {
        "type": "clear_tool_uses_20250919",
        "trigger": _tokens(trigger_tokens),
        "keep": {"type": "tool_uses", "value": keep},
    }
    if clear_at_least:
        edit["clear_at_least"] = _tokens(clear_at_least)
    if exclude_tools:
        edit["exclude_tools"] = list(exclude_tools)
    return edit


def compact_edit(*, trigger_tokens: int, instructions: str | None = None) -> dict[str, Any]:
    """The ``compact_20260112`` edit: summarise once the input passes ``trigger_tokens``."""
    edit: dict[str, Any] = {"type": "compact_20260112", "trigger": _tokens(trigger_tokens)}
    if instructions:
        edit["instructions"] = instructions
    return edit


def with_edit(options: ChatOptions, edit: Mapping[str, Any]) -> ChatOptions:
    """``options`` with ``edit`` added to ``extra["context_management"]["edits"]``."""
    extra = dict(options.extra)
    management = dict(extra.get("context_management") or {})
    edits = [e for e in management.get("edits", ()) if e.get("type") != edit.get("type")]
    management["edits"] = [*edits, dict(edit)]
    extra["context_management"] = management
    return replace(options, extra=extra)
