"""A policy's settings as a fingerprint part, so a run paused under some settings is not
resumed under others (see :func:`tether.state_seal.agent_fingerprint`).

Only the settings that differ from their defaults are listed, so a setting added later
with a default that keeps the old behaviour changes no fingerprint. A function is named
by its module and qualified name (its code is not read: a function changed under the same
name keeps the fingerprint); an object by its ``state_identity`` when it has one, else
by its class.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Set
from typing import Any

__all__ = ["settings_identity"]


def settings_identity(settings: Any) -> dict[str, Any] | None:
    """The fields of the dataclass ``settings`` that differ from their defaults, in a
    JSON-ready form; ``None`` when all are at their defaults."""
    changed: dict[str, Any] = {}
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        if default is dataclasses.MISSING or (value is not default and value != default):
            changed[f.name] = _plain(value)
    return changed or None


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, Set):
        return sorted(str(_plain(v)) for v in value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    own = getattr(value, "state_identity", None)
    if own is not None and not callable(own):
        return _plain(own)
    named = value if hasattr(value, "__qualname__") else type(value)
    return f"{getattr(named, '__module__', '?')}.{named.__qualname__}"
