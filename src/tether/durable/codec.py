"""What durable mode writes to the step log, as plain JSON-ready values.

A step's output is stored by DBOS and handed back on replay. Storing tether's own objects
(pickled) would tie the log to this version's classes; these dicts tie it only to the
message JSON format, which :mod:`tether.messages` already keeps stable. An exception a
step raised is stored as data too and raised again, identical for the loop, on replay.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tether.clients import ChatResponse
from tether.errors import ContextWindowExceeded, ProviderError, StateError, ToolFailure
from tether.messages import (
    message_from_dict,
    message_to_dict,
    usage_from_dict,
    usage_to_dict,
)
from tether.outcomes import Decision, Outcome, RunResult, RunState
from tether.replay.cassette import response_from_dict
from tether.state_seal import StateKeys

JSON = dict[str, Any]


class ReplayedError(Exception):
    """Base of the exceptions raised again from the log; each replayed exception is an
    instance of a subclass carrying the original type's name, so the text the loop
    shows the model (``Tool 'x' failed: ValueError: ...``) is the same on replay."""


_replayed_types: dict[str, type[ReplayedError]] = {}


def _replayed(type_name: str, message: str) -> ReplayedError:
    cls = _replayed_types.get(type_name)
    if cls is None:
        cls = type(type_name, (ReplayedError,), {})
        _replayed_types[type_name] = cls
    return cls(message)


def _type_name(exc: BaseException) -> str:
    return type(exc).__name__


# --- model requests: a response is stored as a cassette stores it -------------------------


def model_error_to_json(exc: Exception) -> JSON:
    """A failed model request as stored in the log."""
    if isinstance(exc, ContextWindowExceeded):
        return {"context_exceeded": str(exc)}
    if isinstance(exc, ProviderError):
        return {"provider_error": {"message": str(exc), "kind": exc.kind, "status": exc.status}}
    return {"client_error": {"type": _type_name(exc), "message": str(exc)}}


def model_outcome_from_json(data: Mapping[str, Any]) -> ChatResponse:
    """The response a logged model step gave, or the exception it raised, raised again."""
    if "response" in data:
        return response_from_dict(data["response"])
    if "context_exceeded" in data:
        raise ContextWindowExceeded(str(data["context_exceeded"]))
    if "provider_error" in data:
        err = data["provider_error"]
        raise ProviderError(str(err["message"]), kind=err["kind"], status=err.get("status"))
    err = data["client_error"]
    raise _replayed(str(err["type"]), str(err["message"]))


# --- tool calls -----------------------------------------------------------------------


def tool_error_to_json(exc: Exception) -> JSON:
    """A failed tool call as stored in the log."""
    if isinstance(exc, ToolFailure):
        return {"failure": str(exc)}
    return {"error": {"type": _type_name(exc), "message": str(exc)}}


def tool_outcome_from_json(data: Mapping[str, Any]) -> str:
    """The text a logged tool step returned, or the exception it raised, raised again."""
    if "text" in data:
        return str(data["text"])
    if "failure" in data:
        raise ToolFailure(str(data["failure"]))
    err = data["error"]
    raise _replayed(str(err["type"]), str(err["message"]))


# --- decisions and results ------------------------------------------------------------


def decisions_to_json(decisions: Iterable[Decision]) -> list[JSON]:
    """Decisions as sent to a waiting run."""
    return [
        {
            "call_id": d.call_id,
            "arguments_hash": d.arguments_hash,
            "approved": d.approved,
            "reason": d.reason,
            "run_id": d.run_id,
        }
        for d in decisions
    ]


def decisions_from_json(data: Any) -> list[Decision]:
    """Inverse of :func:`decisions_to_json`; raises :class:`StateError` on a bad message."""
    if not isinstance(data, list):
        raise StateError("a decisions message must be a list of decisions")
    out = []
    for item in data:
        if not isinstance(item, Mapping) or not isinstance(item.get("approved"), bool):
            raise StateError("each decision needs call_id, arguments_hash and approved")
        try:
            out.append(
                Decision(
                    str(item["call_id"]),
                    str(item["arguments_hash"]),
                    item["approved"],
                    str(item.get("reason", "")),
                    str(item.get("run_id", "")),
                )
            )
        except KeyError as exc:
            raise StateError(f"a decision lacks {exc.args[0]!r}") from None
    return out


def result_to_json(result: RunResult) -> JSON:
    """A run's result as a workflow returns it."""
    o = result.outcome
    return {
        "outcome": {"kind": o.kind, "reason": o.reason, "limit": o.limit, "error": o.error},
        "transcript": [message_to_dict(m) for m in result.transcript],
        "usage": usage_to_dict(result.usage),
        "turns": result.turns,
        "run_id": result.run_id,
        "state": result.state.to_json() if result.state is not None else None,
    }


def result_from_json(data: Mapping[str, Any], keys: StateKeys | None = None) -> RunResult:
    """Inverse of :func:`result_to_json` (the state verified with ``keys``, default
    ``TETHER_STATE_KEYS``)."""
    o = data["outcome"]
    state = data.get("state")
    return RunResult(
        Outcome(o["kind"], o["reason"], o.get("limit"), o.get("error")),
        tuple(message_from_dict(m) for m in data["transcript"]),
        usage_from_dict(data.get("usage", {})),
        int(data["turns"]),
        str(data.get("run_id", "")),
        RunState.from_json(state, keys=keys) if state else None,
    )
