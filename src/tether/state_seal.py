"""The keys that seal run states, the seal itself and the fingerprint of an agent.

A run state that leaves the process (a queue, a table, a file, a form) comes back possibly
rewritten. tether trusts one only if it carries a seal that tether made: an HMAC-SHA256, with
a key the application holds, over the canonical encoding of the whole state. A key has an
id; a :class:`StateKeys` ring signs with its first (newest) key and verifies with any of
them, so a key is rotated by putting a new one in front and dropping the old one once the
states it sealed are gone.

The keys come from ``Agent(..., state_key=...)`` or from the environment variable
``TETHER_STATE_KEYS``: comma-separated ``id:secret`` pairs, newest first, each secret at
least 32 characters (``tether state-key`` prints a fresh one). No secret is ever part of an
error message or a ``repr``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tether.errors import ConfigError, StateError

__all__ = [
    "INSECURE_UNSEALED_STATES_FOR_TESTS",
    "KEYS_ENV",
    "StateKeys",
    "agent_fingerprint",
    "canonical",
    "chain",
]

KEYS_ENV = "TETHER_STATE_KEYS"
"""The environment variable holding the state keys: ``id:secret[,id:secret...]``, newest first."""
MIN_SECRET = 32
EPHEMERAL_PREFIX = "ephemeral-"
_DOMAIN = b"tether.run-state.v3\n"
_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
NO_KEY = (
    f"no run-state key is configured, so this state cannot leave the process: set "
    f"{KEYS_ENV}=id:secret (make one with `tether state-key`) or pass Agent(state_key=...)"
)


def canonical(value: Any) -> bytes:
    """The one encoding that is sealed: JSON, sorted keys, no spaces, UTF-8, no NaN."""
    try:
        text = json.dumps(
            value,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
            default=str,
        )
    except (TypeError, ValueError, RecursionError) as exc:
        raise StateError(f"cannot encode run state: {exc}") from None
    return text.encode()


def chain(texts: Iterable[bytes | str], start: str = "") -> str:
    """A SHA-256 hash chain over canonical ``texts`` (continuing ``start``): equal only for
    equal sequences, so the seal covers a transcript through one digest."""
    value = start
    for text in texts:
        data = text.encode() if isinstance(text, str) else text
        value = hashlib.sha256(value.encode() + b"\n" + data).hexdigest()
    return value


class StateKeys:
    """A ring of sealing keys: seals with the first, verifies with any."""

    __slots__ = ("_keys", "portable", "unsealed")

    def __init__(
        self,
        keys: Sequence[tuple[str, str | bytes]],
        *,
        portable: bool = True,
        unsealed: bool = False,
    ) -> None:
        if not keys and not unsealed:
            raise ConfigError(f"a state key ring needs at least one key; {NO_KEY}")
        ring: dict[str, bytes] = {}
        for key_id, secret in keys:
            if not _KEY_ID.match(key_id):
                raise ConfigError(
                    f"state key id {key_id!r} must be 1-64 letters, digits, '_', '.' or '-'"
                )
            if portable and key_id.startswith(EPHEMERAL_PREFIX):
                raise ConfigError(f"state key ids starting {EPHEMERAL_PREFIX!r} are reserved")
            raw = secret.encode() if isinstance(secret, str) else bytes(secret)
            if len(raw) < MIN_SECRET:
                raise ConfigError(
                    f"state key {key_id!r} is too short: use at least {MIN_SECRET} characters"
                )
            if key_id in ring:
                raise ConfigError(f"state key id {key_id!r} is listed twice")
            ring[key_id] = raw
        self._keys = ring
        self.portable = portable
        """False for a key made up for this process only: its states cannot leave it."""
        self.unsealed = unsealed
        """True only for :data:`INSECURE_UNSEALED_STATES_FOR_TESTS`."""

    @classmethod
    def parse(cls, text: str) -> StateKeys:
        """Keys from ``id:secret[,id:secret...]`` (newest first)."""
        pairs = []
        for item in text.split(","):
            key_id, sep, secret = item.strip().partition(":")
            if not sep:
                raise ConfigError(f"{KEYS_ENV} must read id:secret[,id:secret...], newest first")
            pairs.append((key_id.strip(), secret.strip()))
        return cls(pairs)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StateKeys | None:
        """The keys in ``TETHER_STATE_KEYS``, or ``None`` if it is unset or empty."""
        text = (os.environ if environ is None else environ).get(KEYS_ENV, "").strip()
        return cls.parse(text) if text else None

    @classmethod
    def generate(cls, key_id: str | None = None) -> StateKeys:
        """A ring of one fresh random key."""
        return cls([(key_id or f"k{secrets.token_hex(4)}", secrets.token_urlsafe(32))])

    @classmethod
    def ephemeral(cls) -> StateKeys:
        """A random key for this process alone: its states resume here and nowhere else."""
        return cls(
            [(EPHEMERAL_PREFIX + secrets.token_hex(4), secrets.token_bytes(32))], portable=False
        )

    def rotated(self, key_id: str | None = None) -> StateKeys:
        """This ring with a fresh key in front (it seals from now on; the others verify)."""
        fresh = StateKeys.generate(key_id)
        return StateKeys([*fresh._keys.items(), *self._keys.items()])

    def without(self, key_id: str) -> StateKeys:
        """This ring without ``key_id`` (the states it sealed are refused from now on)."""
        return StateKeys([(k, v) for k, v in self._keys.items() if k != key_id])

    def dumps(self) -> str:
        """The ring as ``TETHER_STATE_KEYS`` text. It holds the secrets: write it only
        where the key belongs (a file readable by the service alone, a secret store)."""
        if not self.portable or self.unsealed:
            raise ConfigError(NO_KEY)
        return ",".join(f"{k}:{v.decode('latin-1')}" for k, v in self._keys.items())

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids, newest first."""
        return tuple(self._keys)

    def seal(self, body: bytes) -> str:
        """The seal of ``body``: ``key_id:hex``; ``""`` for the unsealed test ring."""
        if self.unsealed:
            return ""
        key_id, key = next(iter(self._keys.items()))
        return f"{key_id}:{self._mac(key, key_id, body)}"

    def verify(self, seal: Any, body: bytes) -> None:
        """Raise :class:`StateError` unless ``seal`` was made by one of these keys over
        exactly ``body``."""
        if self.unsealed and seal in ("", None):
            return
        if not isinstance(seal, str) or ":" not in seal:
            raise StateError(
                "the run state is not sealed: it was not made by this application's tether "
                "(or was made before states were sealed) and is refused"
            )
        key_id, _, mac = seal.partition(":")
        key = self._keys.get(key_id)
        if key is None:
            raise StateError(
                f"the run state was sealed with key {key_id[:64]!r}, which is not configured "
                f"(removed or never known); it is refused"
            )
        if not hmac.compare_digest(self._mac(key, key_id, body), mac):
            raise StateError("the run state's seal does not match: it was altered; refused")

    @staticmethod
    def _mac(key: bytes, key_id: str, body: bytes) -> str:
        return hmac.new(key, _DOMAIN + key_id.encode() + b"\n" + body, hashlib.sha256).hexdigest()

    def __repr__(self) -> str:
        if self.unsealed:
            return "INSECURE_UNSEALED_STATES_FOR_TESTS"
        return f"StateKeys(key_ids={list(self._keys)!r})"


INSECURE_UNSEALED_STATES_FOR_TESTS = StateKeys((), unsealed=True)
"""A ring that seals nothing and accepts states without a seal. For tests that build states
by hand only: anyone who can write a state can then make the agent run anything it allows."""


def resolve_keys(state_key: StateKeys | str | None) -> StateKeys:
    """An agent's ring: the one given, else ``TETHER_STATE_KEYS``, else a key for this
    process alone (its states resume in this process and cannot leave it)."""
    if isinstance(state_key, StateKeys):
        return state_key
    if isinstance(state_key, str):
        return StateKeys.parse(state_key)
    return StateKeys.from_env() or StateKeys.ephemeral()


def agent_fingerprint(tools: Iterable[Any], policy: Any = None) -> str:
    """What a state may be resumed on: each tool's name, parameter schema, declared effect,
    argument roles and approval requirement, and the policy's identity (its class, and its
    ``state_identity`` attribute when it has one). SHA-256 of their canonical encoding."""
    described = [
        {
            "name": t.name,
            "schema": t.spec.parameters,
            "effect": t.effect,
            "roles": dict(t.roles),
            "third_party": list(t.third_party),
            "approval": bool(t.requires_approval),
        }
        for t in sorted(tools, key=lambda t: str(t.name))
    ]
    policy_id = None
    if policy is not None:
        policy_id = [
            f"{type(policy).__module__}.{type(policy).__qualname__}",
            getattr(policy, "state_identity", None),
        ]
    body = canonical({"tools": described, "policy": policy_id})
    return hashlib.sha256(body).hexdigest()
