"""The bounded agent loop.

Each turn: check the limits, check the history, call the model, append its reply, decide
on *content* (no tool call = final answer), rule on and run the calls, append their
results, repeat. Every exit is a typed :class:`~tether.outcomes.Outcome` with the transcript
attached, and the transcript is always one that a provider would accept (every call
answered, truthfully: a call interrupted mid-run says so).

Cancellation follows asyncio: cancelling the task that awaits :meth:`Agent.run` raises
``CancelledError`` there (after the transcript is closed and ``RunFinished`` is emitted).
For a typed ``cancelled`` result, start the run with :meth:`Agent.start` and call
:meth:`RunHandle.cancel`.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Generic

from typing_extensions import TypeVar

from tether.answers import REASKS_KEY, FinalAnswers, Invalid, Reask, Valid
from tether.clients import ChatClient, ChatOptions, ChatResponse, ResponseDone, TextDelta
from tether.errors import ContextWindowExceeded, InvalidHistoryError, ProviderError
from tether.events import (
    Event,
    Listener,
    MessageAppended,
    ModelRequest,
    ModelResponse,
    RunFinished,
    RunStarted,
)
from tether.history import HistoryChecker
from tether.invoke import NOT_RUN_TRUNCATED, Invoker, TurnOutcome
from tether.limits import Budget, Limits
from tether.messages import TOO_DEEP, Message, Text, ToolCall, ToolResult, Usage, within_depth
from tether.outcomes import NO_VALUE, Outcome, RunResult
from tether.rulings import CallPolicy
from tether.run_handle import RunHandle
from tether.run_state import Decision, PendingApproval, RunState
from tether.state_gate import Migration, check_decisions, open_state
from tether.state_seal import StateKeys, agent_fingerprint, resolve_keys
from tether.state_store import StateStore, leased
from tether.structured import OutputType
from tether.tools import DepsT, RunContext, Tool

OutputT = TypeVar("OutputT", default=str)


_NO_METADATA: Mapping[str, Any] = MappingProxyType({})


@dataclass(slots=True)
class _Run:
    """The mutable state of one run in progress."""

    run_id: str
    history: list[Message]
    budget: Budget
    deps: Any
    usage: Usage = field(default_factory=Usage)
    turns: int = 0
    consecutive_errors: int = 0
    call_ids: set[str] = field(default_factory=set)
    checker: HistoryChecker = field(default_factory=HistoryChecker)
    emit: Listener | None = None
    memo: dict[str, Any] = field(default_factory=dict)
    version: int = 0
    """Version of the state this run was resumed from (0 for a new run)."""
    digest: tuple[int, str] | None = None
    """Length and hash chain of the transcript it was resumed with (``None``: new run)."""
    ready: dict[str, ToolResult] = field(default_factory=dict)
    """Results of the open turn's calls that ran before an approval round."""
    turn_metadata: dict[str, Any] = field(default_factory=dict)
    stop_requested: bool = False
    invoker: Invoker | None = None
    make_ctx: Callable[[ToolCall | None], RunContext[Any]] | None = None


class Agent(Generic[DepsT, OutputT]):
    """A model, its tools, its instructions and its limits.

    ``await agent.run(prompt)`` returns a :class:`RunResult`; ``result.output`` is the answer
    only if the run completed. ``policy`` rules on every call with the tool's own ruling
    (:mod:`tether.rulings`). With ``output_type`` (a pydantic model, dataclass, enum...;
    ``tether.structured.OutputType.of(...)`` for a ``Literal``) every request asks the provider
    for that schema, the final answer is validated into it (one re-ask when invalid, within
    the run's bounds) and ``result.output`` is the object (see :mod:`tether.answers`).

    A run waiting for approval leaves a state sealed with ``state_key`` (a
    :class:`~tether.state_seal.StateKeys` ring or its ``id:secret,...`` text; default
    ``$TETHER_STATE_KEYS``, else a key of this process alone, whose states cannot leave it).
    ``state_migrations`` maps the :attr:`fingerprint` of an older agent to a function that
    carries its states over (see ``docs/run-state.md``).
    """

    def __init__(
        self,
        client: ChatClient,
        tools: Iterable[Tool] = (),
        *,
        instructions: str | None = None,
        limits: Limits | None = None,
        options: ChatOptions | None = None,
        deps: DepsT | None = None,
        listeners: Iterable[Listener] = (),
        stream: bool = False,
        policy: CallPolicy | None = None,
        output_type: type[OutputT] | OutputType[OutputT] | None = None,
        state_key: StateKeys | str | None = None,
        state_migrations: Mapping[str, Migration] | None = None,
    ) -> None:
        self.client = client
        self.tools: dict[str, Tool] = {}
        for t in tools:
            if t.name in self.tools:
                raise ValueError(f"two tools are named {t.name!r}")
            self.tools[t.name] = t
        self.specs = tuple(t.spec for t in self.tools.values())
        self.limits = limits or Limits()
        base = options or ChatOptions()
        if instructions is not None:
            base = replace(base, instructions=instructions)
        self.answers = None if output_type is None else FinalAnswers.of(output_type)
        if self.answers is not None:
            base = replace(base, output_schema=self.answers.output.schema)
        self.options = base
        self.deps = deps
        self.listeners: list[Listener] = list(listeners)
        self.stream = stream
        self.policy = policy
        self.state_keys = resolve_keys(state_key)
        self.state_migrations = dict(state_migrations or {})

    @property
    def fingerprint(self) -> str:
        """What this agent's states are bound to: its tools' names, schemas, effects, roles
        and approvals, and its policy (:func:`~tether.state_seal.agent_fingerprint`)."""
        return agent_fingerprint(self.tools.values(), self.policy)

    # --- public entry points ------------------------------------------------------------

    async def run(
        self,
        prompt: str | Sequence[Message],
        *,
        deps: DepsT | None = None,
        run_id: str | None = None,
        store: StateStore | None = None,
    ) -> RunResult[OutputT]:
        """Run until a final answer or a bound; never raises for model or tool failures.

        With ``store``, a run that ends ``awaiting_approval`` saves its state there.
        """
        return await self._drive(self._new_run(prompt, deps, run_id), None, store)

    def start(
        self,
        prompt: str | Sequence[Message],
        *,
        deps: DepsT | None = None,
        run_id: str | None = None,
        store: StateStore | None = None,
    ) -> RunHandle:
        """Start a run in a task of its own; ``await`` the handle for its result, and
        :meth:`RunHandle.cancel` it for a typed ``cancelled`` result."""
        run = self._new_run(prompt, deps, run_id)
        return RunHandle(run, asyncio.ensure_future(self._drive(run, None, store)))

    async def resume(
        self,
        state: RunState | str,
        decisions: Iterable[Decision] = (),
        *,
        deps: DepsT | None = None,
        store: StateStore | None = None,
    ) -> RunResult[OutputT]:
        """Continue a run that was awaiting approval, applying the human's decisions.

        Verify, claim, run: the state's seal is checked before anything in it is read, then
        that it was made by this agent, then the decisions (each from this run, for a
        pending call and the hash of its exact arguments); anything else raises
        :class:`~tether.errors.StateError` and runs nothing. With ``store``, the state is
        then leased there (only the run's current sequence, by one resume at a time), and
        the run's next state, or its end, is stored under that lease.
        """
        state = open_state(state, self.state_keys, self.fingerprint, self.state_migrations)
        chosen = check_decisions(state, decisions)
        if store is None:
            return await self._drive(self._resumed(state, deps), (chosen, state), None)
        async with leased(store, state) as lease:
            result = await self._drive(self._resumed(state, deps), (chosen, state), None)
            await store.finish(lease, result.state)
        return result

    def as_tool(self, name: str, description: str) -> Tool:
        """This agent as a tool of another: a fresh history per call, its own limits and
        tools; it returns only its conclusion, and its usage rolls up into the caller's."""
        from tether.context.subagent import SubAgentTool

        return SubAgentTool(self, name, description)

    def run_sync(self, prompt: str | Sequence[Message], **kwargs: Any) -> RunResult[OutputT]:
        """:meth:`run` for code that has no event loop. Returns at the wall-time limit even
        if a sync tool is still running in its thread (it is reported ``abandoned``)."""
        return asyncio.run(self.run(prompt, **kwargs))

    # --- the loop -----------------------------------------------------------------------

    def _new_run(self, prompt: str | Sequence[Message], deps: Any, run_id: str | None) -> _Run:
        history = [Message.user(prompt)] if isinstance(prompt, str) else list(prompt)
        run = _Run(run_id or secrets.token_hex(16), history, Budget(self.limits), self._deps(deps))
        run.call_ids.update(c.id for m in history for c in m.tool_calls)
        return run

    def _resumed(self, state: RunState, deps: Any) -> _Run:
        run = _Run(
            state.run_id,
            list(state.transcript),
            Budget(self.limits, state.elapsed_seconds),
            self._deps(deps),
            state.usage,
            state.turns,
            state.consecutive_errors,
            memo=dict(state.memo),
            version=state.version,
            digest=state.transcript_digest(),
            ready={r.call_id: r for r in state.ready_results},
            turn_metadata={k: dict(v) for k, v in state.turn_metadata.items()},
        )
        run.call_ids.update(c.id for m in run.history for c in m.tool_calls)
        return run

    async def _drive(
        self,
        run: _Run,
        resumed: tuple[Mapping[str, Decision], RunState] | None,
        store: StateStore | None,
    ) -> RunResult:
        emit = run.emit = self._emitter()
        if emit:
            emit(RunStarted(run.run_id))
        invoker = run.invoker = Invoker(self.tools, self.limits, emit, self.policy)
        if resumed is None and self.policy is not None:
            self.policy.begin(tuple(run.history), self._context_factory(run)(None))
        remaining = run.budget.remaining_seconds()
        wall = asyncio.timeout(None if remaining is None else max(remaining, 0.0))
        try:
            async with wall:
                result = await self._loop(run, invoker, resumed)
        except TimeoutError:
            if not wall.expired():
                raise
            self._close_open_calls(run, "wall-time limit reached")
            result = self._finish(
                run, Outcome("budget_exceeded", "wall-time limit reached", "max_wall_seconds")
            )
        except asyncio.CancelledError:
            self._close_open_calls(run, "cancelled")
            result = self._finish(run, Outcome("cancelled", "the run was cancelled"))
            if emit:
                emit(RunFinished(result.outcome))
            task = asyncio.current_task()
            if not run.stop_requested or task is None:
                raise
            task.uncancel()  # a stop asked through the run's handle: report it, typed
            return result
        if emit:
            emit(RunFinished(result.outcome))
        if store is not None and result.state is not None:
            await store.save(result.state)
        return result

    async def _loop(
        self,
        run: _Run,
        invoker: Invoker,
        resumed: tuple[Mapping[str, Decision], RunState] | None,
    ) -> RunResult:
        if resumed is not None:
            calls = run.history[-1].tool_calls
            chosen, state = resumed
            waiting = {p.call_id: p for p in state.pending}
            stop = await self._run_calls(run, invoker, calls, chosen, waiting)
            if stop is not None:
                return stop
        while True:
            if run.stop_requested:  # a cancel a tool swallowed still stops the run
                raise asyncio.CancelledError
            stop = self._check_limits(run)
            if stop is not None:
                return stop
            response = await self._request(run)
            if isinstance(response, RunResult):
                return response
            message, calls = self._normalise(run, response.message)
            stop = self._decide(run, message, calls, response)
            if stop is not None:
                return stop
            if calls:
                stop = await self._run_calls(run, invoker, calls, None, None)
                if stop is not None:
                    return stop

    def _check_limits(self, run: _Run) -> RunResult | None:
        if run.turns >= self.limits.max_turns:
            return self._finish(
                run,
                Outcome("turn_cap", f"no final answer in {run.turns} turns", "max_turns"),
            )
        exhausted = run.budget.exhausted(run.usage)
        if exhausted is not None:
            return self._finish(run, Outcome("budget_exceeded", f"{exhausted} reached", exhausted))
        violations = run.checker.check(run.history)
        if violations:
            raise InvalidHistoryError(violations)
        return None

    async def _request(self, run: _Run) -> ChatResponse | RunResult:
        run.turns += 1
        emit = run.emit
        if emit:
            emit(ModelRequest(run.turns, len(run.history)))
        try:
            options = self._capped(run)
            if self.stream and emit:
                response = await self._streamed(run, emit, options)
            else:
                response = await self.client.complete(run.history, self.specs, options)
        except ContextWindowExceeded as exc:
            return self._finish(run, Outcome("context_exceeded", str(exc)))
        except ProviderError as exc:
            if exc.usage is not None:  # a reply the adapter rejected was still paid for
                run.usage = run.usage + exc.usage
            return self._finish(run, Outcome("failed", str(exc), error=exc.kind))
        except (InvalidHistoryError, asyncio.CancelledError):
            raise
        except Exception as exc:
            return self._finish(
                run, Outcome("failed", f"client error: {type(exc).__name__}: {exc}", error="client")
            )
        run.usage = run.usage + response.usage
        if emit:
            emit(ModelResponse(run.turns, response))
        return response

    def _capped(self, run: _Run) -> ChatOptions:
        """The options, asking for no more output than the token budget has left."""
        allowance = run.budget.output_allowance(run.usage)
        asked = self.options.max_output_tokens
        if allowance is None or (asked is not None and asked <= allowance):
            return self.options
        return replace(self.options, max_output_tokens=allowance)

    async def _streamed(self, run: _Run, emit: Any, options: ChatOptions) -> ChatResponse:
        final: ChatResponse | None = None
        async for chunk in self.client.stream(run.history, self.specs, options):
            if isinstance(chunk, TextDelta):
                emit(chunk)
            elif isinstance(chunk, ResponseDone):
                final = chunk.response
        if final is None:
            raise ProviderError("the stream ended without a response", kind="other")
        return final

    def _decide(
        self, run: _Run, message: Message, calls: list[ToolCall], response: ChatResponse
    ) -> RunResult | None:
        """Append the reply and say whether the run ends here (content first)."""
        stop = response.stop_reason
        if not message.parts:
            if stop.truncated:
                return self._finish(run, Outcome("truncated", "the reply was cut off empty"))
            if stop.refused:
                return self._finish(run, Outcome("refused", f"refused ({stop.raw})"))
            return self._finish(
                run, Outcome("failed", "the model returned an empty reply", error="empty_reply")
            )
        self._append(run, message)
        over = run.budget.overshoot(run.usage, truncated=stop.truncated)
        if over is not None:  # the provider reported more than the budget allowed
            self._answer_unrun(run, "Not executed: the token budget is spent.")
            return self._finish(run, Outcome("budget_exceeded", over[1], over[0]))
        if stop.truncated:
            self._answer_unrun(run, NOT_RUN_TRUNCATED)
            return self._finish(
                run,
                Outcome("truncated", f"the reply hit the output token limit ({stop.raw})"),
            )
        if stop.refused:
            self._answer_unrun(run, "Not executed: the model refused.")
            return self._finish(run, Outcome("refused", f"the model refused ({stop.raw})"))
        if stop.context_exceeded:
            self._answer_unrun(run, "Not executed: the context window is full.")
            return self._finish(run, Outcome("context_exceeded", "the context window is full"))
        if calls or stop.paused:
            return None
        if self.answers is None:
            return self._finish(run, Outcome("completed", "final answer"))
        return self._typed_answer(run, message)

    def _typed_answer(self, run: _Run, message: Message) -> RunResult | None:
        """Validate the final answer into the output type; re-ask, or end the run."""
        assert self.answers is not None
        reasked = int(run.memo.get(REASKS_KEY, 0))  # kept in the state across approvals
        verdict = self.answers.read(message, reasked)
        if isinstance(verdict, Valid):
            return self._finish(run, Outcome("completed", "final answer"), value=verdict.value)
        if isinstance(verdict, Invalid):
            return self._finish(run, verdict.outcome)
        assert isinstance(verdict, Reask)
        run.memo[REASKS_KEY] = reasked + 1
        self._append(run, verdict.message)
        return None

    async def _run_calls(
        self,
        run: _Run,
        invoker: Invoker,
        calls: list[ToolCall],
        decisions: Mapping[str, Decision] | None,
        waiting: Mapping[str, PendingApproval] | None,
    ) -> RunResult | None:
        ready = run.ready
        todo = [c for c in calls if c.id not in ready] if ready else calls
        outcome = await invoker.run_turn(
            todo, self._context_factory(run), run.turns, decisions, waiting
        )
        _merge_metadata(run.turn_metadata, outcome)
        if not ready and not outcome.pending:  # the common case: every call ran just now
            return self._record_results(run, outcome.results)  # type: ignore[arg-type]
        for call, result in zip(todo, outcome.results, strict=True):
            if result is not None:
                ready[call.id] = result
        if outcome.pending:
            state = RunState(
                run.run_id,
                tuple(run.history),
                run.usage,
                run.turns,
                run.consecutive_errors,
                run.budget.elapsed(),
                tuple(outcome.pending),
                tuple(ready[c.id] for c in calls if c.id in ready),
                run.version + 1,
                dict(run.memo),
                dict(run.turn_metadata),
                self.fingerprint,
            ).sealed(self.state_keys, run.digest)
            names = ", ".join(f"{p.tool} ({p.call_id})" for p in outcome.pending)
            return self._finish(
                run, Outcome("awaiting_approval", f"waiting for approval of {names}"), state
            )
        results = [ready[c.id] for c in calls]
        run.ready = {}
        return self._record_results(run, results)

    def _record_results(self, run: _Run, results: list[ToolResult]) -> RunResult | None:
        """Append one turn's results. A turn whose every call failed counts toward
        ``max_consecutive_errors``; a refusal (denied, blocked) is a decision, not a failure,
        and neither counts nor resets the count."""
        metadata: Mapping[str, Any] = _NO_METADATA
        if run.turn_metadata:
            metadata, run.turn_metadata = run.turn_metadata, {}
        self._append(run, Message("tool", tuple(results), metadata))
        failed = 0
        for r in results:
            if r.status == "ok":
                run.consecutive_errors = 0
                return None
            failed += r.status == "error"
        if results and failed == len(results):
            run.consecutive_errors += 1
            if run.consecutive_errors >= self.limits.max_consecutive_errors:
                return self._finish(
                    run,
                    Outcome(
                        "failed",
                        f"{run.consecutive_errors} turns in a row in which every tool call failed",
                        "max_consecutive_errors",
                        "tool_errors",
                    ),
                )
        return None

    # --- helpers ------------------------------------------------------------------------

    def _context_factory(self, run: _Run) -> Callable[[ToolCall | None], RunContext[Any]]:
        """The maker of each call's context for this run (made once per drive; it reads the
        turn and the usage so far when a call's context is made)."""
        if run.make_ctx is not None:
            return run.make_ctx
        deps, run_id, memo = run.deps, run.run_id, run.memo

        def add_usage(extra: Usage) -> None:
            run.usage = run.usage + extra

        def make_ctx(call: ToolCall | None) -> RunContext[Any]:
            return RunContext(deps, run_id, call, run.turns, run.usage, add_usage, memo)

        run.make_ctx = make_ctx
        return make_ctx

    def _normalise(self, run: _Run, message: Message) -> tuple[Message, list[ToolCall]]:
        """An assistant message that can enter the history (no empty text, no stray
        results, every call id present and unique in the run, arguments of bounded depth)
        and its calls."""
        parts: list[Text | ToolCall] = []
        calls: list[ToolCall] = []
        changed = message.role != "assistant"
        for part in message.parts:
            if isinstance(part, Text):
                if part.text:
                    parts.append(part)
                else:
                    changed = True
            elif isinstance(part, ToolCall):
                if not part.id or part.id in run.call_ids:
                    part = _renamed(part, run)
                    changed = True
                if not part.malformed and not within_depth(part.arguments):
                    part = ToolCall(part.id, part.name, {}, TOO_DEEP)
                    changed = True
                run.call_ids.add(part.id)
                parts.append(part)
                calls.append(part)
            else:
                changed = True
        if not changed:
            return message, calls
        return Message("assistant", tuple(parts), message.metadata), calls

    def _append(self, run: _Run, message: Message) -> None:
        run.history.append(message)
        emit = run.emit
        if emit:
            emit(MessageAppended(message))

    def _answer_unrun(self, run: _Run, text: str) -> None:
        """Answer the calls of a reply that ends the run before any of them ran."""
        calls = run.history[-1].tool_calls
        if calls:
            self._append(
                run, Message.results(ToolResult(c.id, text, status="not_run") for c in calls)
            )

    def _close_open_calls(self, run: _Run, why: str) -> None:
        """Give every unanswered call of the last message a truthful result after the run
        stopped (``why``) mid-turn: the real result of each call that finished."""
        if not run.history or run.history[-1].role != "assistant":
            return
        calls = run.history[-1].tool_calls
        if not calls:
            return
        ready = run.ready
        invoker = run.invoker
        assert invoker is not None
        open_calls = [c for c in calls if c.id not in ready]
        closed = {r.call_id: r for r in invoker.close_open(open_calls, why)}
        metadata, run.turn_metadata = run.turn_metadata, {}
        _merge_metadata(metadata, invoker.current)
        self._append(
            run, Message("tool", tuple(ready.get(c.id) or closed[c.id] for c in calls), metadata)
        )
        run.ready = {}

    def _finish(
        self, run: _Run, outcome: Outcome, state: RunState | None = None, value: Any = NO_VALUE
    ) -> RunResult:
        return RunResult(
            outcome, tuple(run.history), run.usage, run.turns, run.run_id, state, value
        )

    def _deps(self, deps: Any) -> Any:
        return self.deps if deps is None else deps

    def _emitter(self) -> Listener | None:
        listeners = self.listeners
        if not listeners:
            return None
        if len(listeners) == 1:
            return listeners[0]

        def emit(event: Event) -> None:
            for listener in listeners:
                listener(event)

        return emit


def _merge_metadata(metadata: dict[str, Any], outcome: TurnOutcome) -> None:
    if outcome.rulings:
        rulings = metadata.setdefault("rulings", {})
        rulings.update({k: r.to_dict() for k, r in outcome.rulings.items()})
    if outcome.decisions:
        decisions = metadata.setdefault("decisions", {})
        decisions.update({k: d.to_dict() for k, d in outcome.decisions.items()})


def _renamed(call: ToolCall, run: _Run) -> ToolCall:
    base = call.id or f"call_{run.run_id[:8]}"
    n = 2
    while f"{base}_{n}" in run.call_ids:
        n += 1
    return ToolCall(f"{base}_{n}", call.name, call.arguments, call.raw_arguments)
