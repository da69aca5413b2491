"""What a run state must pass before a resume runs anything: verify, then decide.

:func:`open_state` checks, in this order, the seal (before anything else in the state is
read), the agent the state belongs to (or the migration given for the agent that made it),
the state's consistency and that it awaits approval; :func:`check_decisions` then checks
the human's decisions against it. :func:`reseal_legacy` is the one way in for a state made
before states were sealed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from tether.errors import StateError
from tether.run_state import Decision, RunState
from tether.state_seal import StateKeys

__all__ = ["Migration", "check_decisions", "open_state", "reseal_legacy"]

Migration = Callable[[RunState], RunState]
"""Turns a verified state made on an older agent into one for this agent (see
``Agent(state_migrations=...)``)."""


def open_state(
    state: RunState | str | bytes,
    keys: StateKeys,
    fingerprint: str,
    migrations: Mapping[str, Migration] | None = None,
) -> RunState:
    """A state that may be resumed on the agent of ``fingerprint``: its seal verified first,
    then the agent it belongs to (a migration applied when one is given for the agent that
    made it), then its consistency and that it awaits approval. :class:`StateError` else."""
    if isinstance(state, str | bytes):
        state = RunState.from_json(state, keys=keys)
    elif not keys.unsealed or state.seal:
        state.verify(keys)
    if state.agent != fingerprint and not (keys.unsealed and not state.agent):
        migrate = (migrations or {}).get(state.agent)
        if migrate is None:
            raise StateError(
                f"run {state.run_id} was paused by another agent (its tools, their schemas, "
                "effects or approvals, or its policy changed); it is refused. Give "
                "Agent(state_migrations={old_fingerprint: migrate}) to carry it over"
            )
        state = replace(migrate(state), agent=fingerprint, seal="")
        state.check()
    else:
        state.check(history=not state.seal)  # a sealed state was checked when it was made
    if not state.pending:
        raise StateError(f"run {state.run_id} is not awaiting approval")
    return state


def reseal_legacy(text: str | bytes, keys: StateKeys, fingerprint: str) -> RunState:
    """A state of format 1 or 2 (made before states were sealed) sealed now, for the agent of
    ``fingerprint``: an operator's one-off upgrade of states kept where nobody else could
    write. Everything but the seal is checked as for any state; trust comes from the caller."""
    from tether.state_seal import INSECURE_UNSEALED_STATES_FOR_TESTS as unsealed

    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise StateError(f"cannot read run state: not JSON ({exc})") from None
    if not isinstance(data, Mapping) or data.get("format", 1) not in (1, 2):
        raise StateError("only a state of format 1 or 2 can be resealed")
    state = RunState.from_dict(data, keys=unsealed)
    return replace(state, agent=fingerprint, seal="").sealed(keys)


def check_decisions(state: RunState, decisions: Iterable[Decision]) -> dict[str, Decision]:
    """The decisions by call id; a :class:`StateError` unless each one comes from this run,
    names a pending call once and carries the hash of its exact arguments."""
    by_call = {p.call_id: p for p in state.pending}
    chosen: dict[str, Decision] = {}
    for d in decisions:
        p = by_call.get(d.call_id)
        if p is None:
            raise StateError(f"no call {d.call_id!r} is awaiting approval in this run")
        if d.run_id != state.run_id:
            raise StateError(
                f"the decision for call {d.call_id!r} was made in another run; "
                "decide again from this run's pending approvals"
            )
        if p.arguments_hash != d.arguments_hash:
            raise StateError(f"the decision for call {d.call_id!r} was made for other arguments")
        if d.call_id in chosen:
            raise StateError(f"two decisions were given for call {d.call_id!r}")
        chosen[d.call_id] = d
    return chosen
