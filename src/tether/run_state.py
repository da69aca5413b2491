"""The run state: what a run waiting for approval leaves behind, sealed.

A :class:`RunState` holds everything needed to continue a run elsewhere: the transcript,
the calls waiting for a human (with what the approver reads: context and ruling), the
results of the calls that already ran, the run's memo, its counters, what was decided, its
sequence number (``version``) and the fingerprint of the agent it belongs to. The agent that
makes a state seals it (:mod:`tether.state_seal`): an HMAC over the canonical encoding of
every field, the transcript included through a hash chain over its messages.

Coming back, a state is verified before anything else in it is read: :meth:`RunState.from_json`
and :meth:`tether.Agent.resume` check the seal first, then that the state belongs to this
agent, then the decisions. A state that fails any of these is a :class:`StateError` and
nothing runs (:mod:`tether.state_gate` is that whole path).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tether.errors import ConfigError, StateError
from tether.messages import (
    Message,
    ToolResult,
    Usage,
    message_from_dict,
    message_to_dict,
    part_from_dict,
    part_to_dict,
    usage_from_dict,
    usage_to_dict,
)
from tether.state_seal import EPHEMERAL_PREFIX, NO_KEY, StateKeys, canonical, chain

__all__ = [
    "STATE_FORMAT",
    "Decision",
    "PendingApproval",
    "RunState",
    "arguments_hash",
    "message_text",
]

STATE_FORMAT = 3
"""Format of the sealed state. Formats 1 and 2 (unsealed) are read only with
:data:`~tether.state_seal.INSECURE_UNSEALED_STATES_FOR_TESTS`."""


def arguments_hash(arguments: Mapping[str, Any]) -> str:
    """A stable hash of a call's arguments (canonical JSON, SHA-256)."""
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def message_text(message: Message) -> str:
    """The canonical text of one message: what the transcript's hash chain covers."""
    return canonical(message_to_dict(message)).decode()


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A call that waits for a human: what it does and what the approver needs to see.

    ``ruling`` is why it waits (the rule that asked, its reason, details such as where each
    argument came from), as a JSON-ready dict.
    """

    call_id: str
    tool: str
    arguments: Mapping[str, Any]
    arguments_hash: str
    context: Any = None
    run_id: str = ""
    ruling: Mapping[str, Any] | None = None

    def approve(self) -> Decision:
        """A decision approving exactly this call, with these arguments, in this run."""
        return Decision(self.call_id, self.arguments_hash, True, run_id=self.run_id)

    def deny(self, reason: str = "") -> Decision:
        """A decision refusing this call."""
        return Decision(self.call_id, self.arguments_hash, False, reason, self.run_id)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        out = {
            "call_id": self.call_id,
            "tool": self.tool,
            "arguments": dict(self.arguments),
            "arguments_hash": self.arguments_hash,
            "context": self.context,
            "run_id": self.run_id,
        }
        if self.ruling:
            out["ruling"] = dict(self.ruling)
        return out


@dataclass(frozen=True, slots=True)
class Decision:
    """A human's answer, bound to one run, one call id and one arguments hash."""

    call_id: str
    arguments_hash: str
    approved: bool
    reason: str = ""
    run_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (as recorded in the transcript's metadata)."""
        out: dict[str, Any] = {"approved": self.approved}
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(frozen=True, slots=True)
class RunState:
    """Everything needed to continue a run elsewhere; sealed by the agent that made it.

    ``version`` is the state's sequence number in its run (1 for the first approval round,
    then 2, ...); a store holds the sequence of each run and lets a state be resumed only
    under it (:mod:`tether.state_store`). ``memo`` is the run's JSON-ready data
    (``RunContext.memo``); ``turn_metadata`` holds what was decided about the calls of the
    open turn (rulings, human decisions). ``agent`` is the fingerprint of the agent it may
    resume on; ``seal`` is ``key_id:mac`` over all the rest.
    """

    run_id: str
    transcript: tuple[Message, ...]
    usage: Usage = field(default_factory=Usage)
    turns: int = 0
    consecutive_errors: int = 0
    elapsed_seconds: float = 0.0
    pending: tuple[PendingApproval, ...] = ()
    ready_results: tuple[ToolResult, ...] = ()
    version: int = 1
    memo: Mapping[str, Any] = field(default_factory=dict)
    turn_metadata: Mapping[str, Any] = field(default_factory=dict)
    agent: str = ""
    seal: str = ""
    _digest: tuple[int, str] | None = field(default=None, init=False, compare=False, repr=False)
    _base: tuple[int, str] | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def state_id(self) -> str:
        """``run_id:version``: the identity of this state."""
        return f"{self.run_id}:{self.version}"

    @property
    def portable(self) -> bool:
        """Whether this state may leave the process (sealed with a configured key)."""
        return not self.seal.startswith(EPHEMERAL_PREFIX)

    def transcript_digest(self, prefix: tuple[int, str] | None = None) -> tuple[int, str]:
        """``(length, hash chain)`` of the transcript; ``prefix`` is a known ``(n, chain)``
        of its first ``n`` messages, so only the rest is hashed."""
        n = len(self.transcript)
        if self._digest is not None and self._digest[0] == n:
            return self._digest
        start, head = prefix if prefix is not None and prefix[0] <= n else (0, "")
        value = (n, chain((message_text(m) for m in self.transcript[start:]), head))
        object.__setattr__(self, "_digest", value)
        return value

    def digest_at(self, n: int) -> str:
        """The hash chain of the first ``n`` messages."""
        if n == len(self.transcript):
            return self.transcript_digest()[1]
        if self._base is not None and self._base[0] == n:
            return self._base[1]
        return chain(message_text(m) for m in self.transcript[:n])

    def body(self) -> dict[str, Any]:
        """What the seal covers: every field, the transcript as its length and digest."""
        n, digest = self.transcript_digest()
        return {
            "format": STATE_FORMAT,
            "run_id": self.run_id,
            "version": self.version,
            "agent": self.agent,
            "usage": usage_to_dict(self.usage),
            "turns": self.turns,
            "consecutive_errors": self.consecutive_errors,
            "elapsed_seconds": self.elapsed_seconds,
            "pending": [p.to_dict() for p in self.pending],
            "ready_results": [part_to_dict(r) for r in self.ready_results],
            "memo": dict(self.memo),
            "turn_metadata": dict(self.turn_metadata),
            "transcript": {"length": n, "digest": digest},
        }

    def sealed(self, keys: StateKeys, prefix: tuple[int, str] | None = None) -> RunState:
        """This state sealed with ``keys``' newest key (``prefix``: see
        :meth:`transcript_digest`)."""
        self.transcript_digest(prefix)
        state = replace(self, seal="")
        object.__setattr__(state, "_digest", self._digest)
        object.__setattr__(state, "_base", prefix)
        object.__setattr__(state, "seal", keys.seal(canonical(state.body())))
        return state

    def verify(self, keys: StateKeys) -> None:
        """Raise :class:`StateError` unless ``keys`` sealed exactly this state."""
        keys.verify(self.seal, canonical(self.body()))

    def to_json(self) -> str:
        """The sealed state as JSON text; a :class:`ConfigError` if it was sealed with a key
        of this process alone (no key configured)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, default=str)

    def to_dict(self, *, transcript: bool = True) -> dict[str, Any]:
        """A JSON-ready dict (``transcript=False``: the transcript as its length and digest,
        for stores that keep the messages apart)."""
        if not self.portable:
            raise ConfigError(NO_KEY)
        out = self.body()
        if transcript:
            out["transcript"] = [message_to_dict(m) for m in self.transcript]
        out["seal"] = self.seal
        return out

    @classmethod
    def from_json(cls, text: str | bytes, *, keys: StateKeys | None = None) -> RunState:
        """Verify and read a state made by :meth:`to_json`. ``keys``: default
        ``TETHER_STATE_KEYS``. Raises :class:`StateError` (naming no secret) on anything
        but a state sealed with one of the keys and consistent."""
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise StateError(f"cannot read run state: not JSON ({exc})") from None
        return cls.from_dict(data, keys=keys)

    @classmethod
    def from_dict(cls, data: Any, *, keys: StateKeys | None = None) -> RunState:
        """Inverse of :meth:`to_dict` with the transcript: the seal is checked first."""
        ring = keys if keys is not None else _env_keys()
        try:
            if not isinstance(data, Mapping):
                raise StateError(f"a run state must be a JSON object, not {type(data).__name__}")
            raw = data.get("transcript")
            if not isinstance(raw, list):
                raise StateError("a run state needs its transcript as a JSON array")
            if ring.unsealed and data.get("format") != STATE_FORMAT:
                return _parse(data, [message_from_dict(m) for m in raw], None)
            texts = [canonical(m) for m in raw]
            digest = (len(texts), chain(texts))
            ring.verify(
                data.get("seal"),
                canonical(
                    {
                        **_without_seal(data),
                        "transcript": {"length": digest[0], "digest": digest[1]},
                    }
                ),
            )
            return _parse(data, [message_from_dict(m) for m in raw], digest)
        except StateError as exc:
            raise StateError(f"cannot read run state: {exc}") from None
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise StateError(f"cannot read run state: {exc}") from None

    @classmethod
    def from_record(
        cls, record: Mapping[str, Any], transcript: Sequence[Message], digest: tuple[int, str]
    ) -> RunState:
        """A stored state: its record (:meth:`to_dict` without the transcript) and its
        messages, whose hash chain the store computed (``digest``). Not verified here: the
        record must name that digest, and :func:`open_state` checks the seal."""
        try:
            stored = record.get("transcript")
            if stored != {"length": digest[0], "digest": digest[1]}:
                raise StateError("the stored messages are not the ones its state was sealed with")
            return _parse(record, list(transcript), digest)
        except (ValueError, KeyError, TypeError, RecursionError, AttributeError) as exc:
            raise StateError(f"cannot read stored run state: {exc}") from None

    def check(self, *, history: bool = True) -> None:
        """Raise :class:`StateError` unless this state can be resumed as it stands: a valid
        transcript (``history``) whose last message holds the open calls; each open call
        either pending (with exactly its arguments and their hash) or answered by a ready
        result."""
        problems = _state_problems(self, history)
        if problems:
            raise StateError(f"inconsistent run state {self.run_id!r}: {'; '.join(problems)}")


def _env_keys() -> StateKeys:
    from tether.state_seal import StateKeys as Keys

    ring = Keys.from_env()
    if ring is None:
        raise ConfigError(NO_KEY)
    return ring


def _without_seal(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "seal"}


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a JSON object, not {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{what} must be a JSON array, not {type(value).__name__}")
    return value


def _parse(
    data: Mapping[str, Any], messages: list[Message], digest: tuple[int, str] | None
) -> RunState:
    fmt = data.get("format", 1 if data.get("version") == 1 else None)
    if fmt not in (1, 2, STATE_FORMAT):
        raise ValueError(f"unsupported state format {fmt!r}")
    run_id = data["run_id"]
    if not isinstance(run_id, str) or not run_id:
        raise ValueError("run_id must be a non-empty string")
    ready = [part_from_dict(r) for r in _list(data.get("ready_results", []), "ready_results")]
    if not all(isinstance(r, ToolResult) for r in ready):
        raise ValueError("ready_results must hold tool results")
    pending = []
    for p in _list(data.get("pending", []), "pending"):
        p = _object(p, "a pending approval")
        ruling = p.get("ruling")
        pending.append(
            PendingApproval(
                call_id=str(p["call_id"]),
                tool=str(p["tool"]),
                arguments=dict(_object(p["arguments"], "pending arguments")),
                arguments_hash=str(p["arguments_hash"]),
                context=p.get("context"),
                run_id=str(p.get("run_id", run_id)),
                ruling=None if ruling is None else dict(_object(ruling, "a ruling")),
            )
        )
    agent, seal = data.get("agent", ""), data.get("seal", "")
    if not isinstance(agent, str) or not isinstance(seal, str):
        raise ValueError("agent and seal must be strings")
    state = RunState(
        run_id=run_id,
        transcript=tuple(messages),
        usage=usage_from_dict(_object(data.get("usage", {}), "usage")),
        turns=_count(data.get("turns", 0), "turns"),
        consecutive_errors=_count(data.get("consecutive_errors", 0), "consecutive_errors"),
        elapsed_seconds=_seconds(data.get("elapsed_seconds", 0.0)),
        pending=tuple(pending),
        ready_results=tuple(r for r in ready if isinstance(r, ToolResult)),
        version=_count(data.get("version", 1), "version") if fmt != 1 else 1,
        memo=dict(_object(data.get("memo", {}), "memo")),
        turn_metadata=dict(_object(data.get("turn_metadata", {}), "turn_metadata")),
        agent=agent,
        seal=seal,
    )
    object.__setattr__(state, "_digest", digest)
    state.check(history=not seal)
    return state


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer")
    return value


def _seconds(value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (0 <= value < float("inf"))
    ):
        raise ValueError("elapsed_seconds must be a non-negative number")
    return float(value)


def _state_problems(state: RunState, history: bool) -> list[str]:
    from tether.history import check

    problems = [str(v) for v in check(state.transcript, final=False)] if history else []
    if not state.transcript:
        return problems or ["the transcript is empty"]
    if state.version < 1:
        problems.append("version must be at least 1")
    last = state.transcript[-1]
    calls = {c.id: c for c in last.tool_calls} if last.role == "assistant" else {}
    if state.pending and not calls:
        problems.append("calls are pending but the transcript does not end with them")
    seen: set[str] = set()
    for p in state.pending:
        call = calls.get(p.call_id)
        if p.call_id in seen:
            problems.append(f"call {p.call_id!r} is pending twice")
        seen.add(p.call_id)
        if call is None:
            problems.append(f"pending call {p.call_id!r} is not one of the open calls")
            continue
        if p.tool != call.name:
            problems.append(f"pending call {p.call_id!r} names {p.tool!r}, not {call.name!r}")
        expected = arguments_hash(call.arguments)
        if arguments_hash(p.arguments) != expected or p.arguments_hash != expected:
            problems.append(
                f"pending call {p.call_id!r} shows other arguments than the call that would run"
            )
        if p.run_id != state.run_id:
            problems.append(f"pending call {p.call_id!r} belongs to run {p.run_id!r}")
    for r in state.ready_results:
        if r.call_id not in calls:
            problems.append(f"ready result {r.call_id!r} answers none of the open calls")
        elif r.call_id in seen:
            problems.append(f"call {r.call_id!r} is both answered and pending")
        seen.add(r.call_id)
    if state.pending and seen != set(calls):
        missing = sorted(set(calls) - seen)
        problems.append(f"open calls {missing} are neither pending nor answered")
    return problems
