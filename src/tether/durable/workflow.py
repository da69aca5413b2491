"""Durable runs: an agent's run as a DBOS workflow, approvals as durable waits.

``DurableAgent(agent, "support")`` registers one workflow. Each run of it drives the
unchanged loop (``Agent.run``, then ``Agent.resume`` after each approval round) with the
agent's client and tools wrapped so that every model request and tool execution is a step
(:mod:`tether.durable.steps`). The run id is the workflow id, so a tool's idempotency key
(:func:`idempotency_key`) is the same in every execution of the run.

A run that ends ``awaiting_approval`` does not end the workflow: it publishes its
:class:`~tether.outcomes.RunState` (read it with :func:`pending_state`) and waits in
``DBOS.recv`` for decisions, which :func:`send_decisions` delivers from any process (a web
console, a CLI) even while no worker is running; the run resumes where it stopped, on
whichever worker holds it, after any number of restarts.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dbos import DBOS, SetWorkflowID

from tether.durable import codec
from tether.durable.steps import DurableChatClient, DurableTool, StepBook
from tether.errors import ConfigError, StateError
from tether.loop import Agent
from tether.messages import Message, message_from_dict, message_to_dict
from tether.outcomes import Decision, PendingApproval, RunResult, RunState
from tether.state_seal import StateKeys
from tether.tools import RunContext

if TYPE_CHECKING:
    from dbos import DBOSClient, Queue, WorkflowHandleAsync

DepsT = TypeVar("DepsT")
DECISIONS_TOPIC = "tether.decisions"
PENDING_EVENT = "tether.pending"
WAIT_CHUNK_SECONDS = 24 * 3600.0
"""A wait with no deadline is a series of ``recv`` of this length (each one logged)."""

_names: set[str] = set()


def idempotency_key(ctx: RunContext[Any]) -> str:
    """The key an irreversible tool passes to the service it calls: the run id (the
    workflow id in durable mode) and the call id, both the same in every replay."""
    call_id = ctx.call.id if ctx.call is not None else ""
    return f"{ctx.run_id}:{call_id}"


class DurableAgent:
    """An :class:`~tether.Agent` whose runs are DBOS workflows (see the module docstring).

    Define every durable agent of a process before :func:`~tether.durable.launch`, under
    a name unique in the application: a restarted worker finds its pending runs' code by
    this name. ``approval_timeout`` (seconds, ``None`` for none) denies the calls still
    undecided when it runs out, so an unanswered approval never runs anything.
    """

    def __init__(
        self, agent: Agent[Any], name: str, *, approval_timeout: float | None = None
    ) -> None:
        if name in _names:
            raise ConfigError(f"a durable agent named {name!r} already exists in this process")
        if approval_timeout is not None and approval_timeout <= 0:
            raise ConfigError("approval_timeout must be positive (or None for no timeout)")
        _names.add(name)
        self.agent = agent
        self.name = name
        self.approval_timeout = approval_timeout
        self.workflow_name = f"tether.agent.{name}"

        async def run_workflow(prompt: str | list[codec.JSON]) -> codec.JSON:
            return await self._execute(prompt)

        self._workflow = DBOS.workflow(name=self.workflow_name)(run_workflow)

    # --- starting runs and reading their results -----------------------------------------

    async def start(
        self,
        prompt: str | Sequence[Message],
        *,
        workflow_id: str | None = None,
        queue: Queue | None = None,
    ) -> str:
        """Start a run (on ``queue`` if given, for whichever worker takes it) and return
        its workflow id. Starting an id that exists already starts nothing: the id is
        the run's idempotency key (use the ticket's id, the request's id...)."""
        workflow_id = workflow_id or uuid.uuid4().hex
        await self._start(prompt, workflow_id, queue)
        return workflow_id

    async def run(
        self, prompt: str | Sequence[Message], *, workflow_id: str | None = None
    ) -> RunResult:
        """Run in this process and wait for the end (approvals included)."""
        handle = await self._start(prompt, workflow_id or uuid.uuid4().hex, None)
        return codec.result_from_json(await handle.get_result(), self.agent.state_keys)

    async def _start(
        self, prompt: str | Sequence[Message], workflow_id: str, queue: Queue | None
    ) -> WorkflowHandleAsync[codec.JSON]:
        payload = prompt if isinstance(prompt, str) else [message_to_dict(m) for m in prompt]
        with SetWorkflowID(workflow_id):
            if queue is None:
                return await DBOS.start_workflow_async(self._workflow, payload)
            return await queue.enqueue_async(self._workflow, payload)

    async def result(self, workflow_id: str) -> RunResult:
        """Wait for a run's end and return its result."""
        handle: WorkflowHandleAsync[codec.JSON] = await DBOS.retrieve_workflow_async(workflow_id)
        data = await handle.get_result()
        return codec.result_from_json(data, self.agent.state_keys)

    # --- the workflow ---------------------------------------------------------------------

    async def _execute(self, prompt: str | list[codec.JSON]) -> codec.JSON:
        run_id = DBOS.workflow_id
        assert run_id is not None
        agent = self._durable_agent()
        start = prompt if isinstance(prompt, str) else [message_from_dict(m) for m in prompt]
        result = await agent.run(start, run_id=run_id)
        waited = False
        while result.outcome.kind == "awaiting_approval" and result.state is not None:
            await publish_pending(result.state)
            waited = True
            decisions = await await_decisions(result.state, self.approval_timeout)
            result = await agent.resume(result.state, decisions)
        if waited:  # a run that never waited published nothing to clear
            await publish_pending(None)
        return codec.result_to_json(result)

    def _durable_agent(self) -> Agent[Any]:
        """The agent whose requests and calls are steps of this execution."""
        return make_durable(self.agent)


def make_durable(agent: Agent[DepsT], book: StepBook | None = None) -> Agent[DepsT]:
    """A copy of ``agent`` whose model requests and tool calls are steps of the current
    workflow (for a workflow of your own that drives an agent among other steps).

    Make it inside the workflow, once per execution: ``book`` holds the step numbers its
    model replies reserve for their calls (give the same book to copies that share a run)."""
    book = book or StepBook()
    durable = copy.copy(agent)
    durable.client = DurableChatClient(agent.client, book)
    durable.tools = {name: DurableTool(t, book) for name, t in agent.tools.items()}
    return durable


async def publish_pending(state: RunState | None) -> None:
    """Publish what the run waits for (read with :func:`pending_state` from any process);
    ``None`` once it waits no more."""
    await DBOS.set_event_async(PENDING_EVENT, None if state is None else state.to_json())


async def await_decisions(state: RunState, deny_after: float | None = None) -> list[Decision]:
    """In a workflow: wait until every pending call of ``state`` has a valid decision sent
    by :func:`send_decisions`; after ``deny_after`` seconds (``None``: no limit) the calls
    still undecided are denied. A durable wait: it survives restarts of the worker, and
    the time it has waited counts across them."""
    pending = {p.call_id: p for p in state.pending}
    chosen: dict[str, Decision] = {}
    deadline = None
    if deny_after is not None:
        deadline = await DBOS.run_step_async(
            {"name": "tether.approval_deadline"}, _clock_plus, deny_after
        )
    while len(chosen) < len(pending):
        wait = WAIT_CHUNK_SECONDS
        if deadline is not None:
            wait = await DBOS.run_step_async(
                {"name": "tether.approval_time_left"}, _seconds_until, deadline
            )
            if wait <= 0:
                break
        message = await DBOS.recv_async(DECISIONS_TOPIC, timeout_seconds=wait)
        if message is not None:
            chosen.update((d.call_id, d) for d in _valid(message, state, pending))
    if len(chosen) == len(pending):
        return list(chosen.values())
    reason = f"no decision within {deny_after:g} seconds"
    return [
        *chosen.values(),
        *(p.deny(reason) for p in state.pending if p.call_id not in chosen),
    ]


def _clock_plus(seconds: float) -> float:
    return time.time() + seconds


def _seconds_until(deadline: float) -> float:
    return deadline - time.time()


def _valid(message: Any, state: RunState, pending: dict[str, PendingApproval]) -> list[Decision]:
    """The decisions of ``message`` that apply to this round; the rest are logged and
    ignored (a stale, forged or mistaken message never runs anything)."""
    try:
        decisions = codec.decisions_from_json(message)
    except StateError as exc:
        DBOS.logger.warning(f"run {state.run_id}: ignored a decisions message: {exc}")
        return []
    valid = []
    for d in decisions:
        p = pending.get(d.call_id)
        if p is None or d.run_id != state.run_id or d.arguments_hash != p.arguments_hash:
            DBOS.logger.warning(f"run {state.run_id}: ignored a decision for {d.call_id!r}")
            continue
        valid.append(d)
    return valid


# --- from any process -----------------------------------------------------------------


async def pending_state(
    workflow_id: str, *, client: DBOSClient | None = None, keys: StateKeys | None = None
) -> RunState | None:
    """The state of a run waiting for decisions (``None`` if it is not waiting), its seal
    verified with ``keys`` (default ``TETHER_STATE_KEYS``).

    From a process running DBOS, or with a :class:`dbos.DBOSClient` on the same database
    from any other process."""
    if client is None:
        text = await DBOS.get_event_async(workflow_id, PENDING_EVENT, timeout_seconds=0)
    else:
        text = await client.get_event_async(workflow_id, PENDING_EVENT, timeout_seconds=0)
    return RunState.from_json(text, keys=keys) if text else None


async def send_decisions(
    workflow_id: str,
    decisions: Iterable[Decision],
    *,
    client: DBOSClient | None = None,
    keys: StateKeys | None = None,
) -> None:
    """Deliver decisions to a run waiting for them, running or not (a run whose worker
    is down receives them when it recovers); its state's seal is verified with ``keys``
    (default ``TETHER_STATE_KEYS``).

    Raises :class:`~tether.errors.StateError` when the run is not waiting or a decision
    does not match one of its pending calls (the run would ignore it)."""
    decisions = list(decisions)
    state = await pending_state(workflow_id, client=client, keys=keys)
    if state is None:
        raise StateError(f"run {workflow_id} is not waiting for decisions")
    pending = {p.call_id: p for p in state.pending}
    for d in decisions:
        p = pending.get(d.call_id)
        if p is None:
            raise StateError(f"no call {d.call_id!r} is awaiting approval in run {workflow_id}")
        if d.run_id != state.run_id or d.arguments_hash != p.arguments_hash:
            raise StateError(
                f"the decision for call {d.call_id!r} was made for another run or other "
                "arguments; decide again from this run's pending approvals"
            )
    payload = codec.decisions_to_json(decisions)
    key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    if client is None:
        await DBOS.send_async(workflow_id, payload, DECISIONS_TOPIC, idempotency_key=key)
    else:
        await client.send_async(workflow_id, payload, DECISIONS_TOPIC, key)
