"""The application's registry of counterparties, matched the way the guards match values.

:class:`Registry` holds the counterparties the application knows (contacts, payees,
workspace members) and answers ``ProvenancePolicy(known_counterparty=...)``: a value is
known when it is, once normalised, one of them (``Alice@Corp.example``, a spaced IBAN, a
``www.`` link, ``+33 6 12 34 56 78`` against ``0612345678``). A value written with
look-alike or invisible characters is never known, and a host alone never stands for an
address on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tether.guards.normalize import Value, disguised, fold, value_keys, values
from tether.tools import RunContext

__all__ = ["Registry"]

_PRIMARY = ("email", "url", "iban", "handle", "channel")


def _primary(value: str) -> list[Value]:
    """The values that say who ``value`` reaches: addresses, links, accounts, handles;
    phone numbers when there is none of those."""
    found = values(value)
    main = [v for v in found if v.kind in _PRIMARY]
    return main or [v for v in found if v.kind == "number" and not v.key.startswith("tail:")]


def _number_keys(v: Value) -> set[str]:
    d = v.key[4:]
    return {v.key, f"tail:{d[-9:]}"} if len(d) >= 9 else {v.key}


def _keys(value: str) -> set[str]:
    keys = {f"text:{fold(value)}"} | {k for k in value_keys(value) if k.startswith("text:")}
    for v in _primary(value):
        keys.update(_number_keys(v) if v.kind == "number" else {v.key})
    return keys


class Registry:
    """A normalised set of known counterparties; call it as a ``known_counterparty`` hook."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._keys: set[str] = set()
        for value in values:
            self.add(value)

    def add(self, value: str) -> None:
        """Register ``value`` (every spelling it answers to)."""
        self._keys.update(_keys(value))

    def known(self, value: str) -> bool:
        """Whether ``value`` is a registered counterparty, however it is written."""
        if disguised(value) or not value.strip():
            return False
        if f"text:{fold(value)}" in self._keys:
            return True
        main = _primary(value)
        return bool(main) and all(
            bool(_number_keys(v) & self._keys) if v.kind == "number" else v.key in self._keys
            for v in main
        )

    def __call__(self, value: str, ctx: RunContext[Any] | None = None) -> bool:
        return self.known(value)

    def __contains__(self, value: object) -> bool:
        return isinstance(value, str) and self.known(value)
