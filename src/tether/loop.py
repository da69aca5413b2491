"""The bounded agent loop.

Each turn: check the limits, check the history, call the model, append its reply, decide
on *content* (no tool call = final answer), run the calls, append their results, repeat.
Every exit is a typed :class:`~tether.outcomes.Outcome` with the transcript attached, and
the transcript is always one that a provider would accept (every call answered).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic

from typing_extensions import TypeVar

from tether.answers import FinalAnswers, Invalid, Reask, Valid
from tether.clients import ChatClient, ChatOptions, ChatResponse, ResponseDone, TextDelta
from tether.errors import ContextWindowExceeded, InvalidHistoryError, ProviderError, StateError
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
from tether.invoke import NOT_EXECUTED_CANCELLED, NOT_EXECUTED_TRUNCATED, Invoker
from tether.limits import Budget, Limits
from tether.messages import Message, Text, ToolCall, ToolResult, Usage
from tether.outcomes import NO_VALUE, Decision, Outcome, RunResult, RunState
from tether.structured import OutputType
from tether.tools import DepsT, RunContext, Tool

OutputT = TypeVar("OutputT", default=str)


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
    answer_reasks: int = 0


class Agent(Generic[DepsT, OutputT]):
    """A model, its tools, its instructions and its limits.

    ``await agent.run(prompt)`` returns a :class:`RunResult`; ``result.output`` is the answer
    only if the run completed. With ``output_type`` (a pydantic model, dataclass, enum...;
    ``tether.structured.OutputType.of(...)`` for a ``Literal``) every request asks the provider
    for that schema, the final answer is validated into it (one re-ask when invalid, within
    the run's bounds) and ``result.output`` is the object (see :mod:`tether.answers`).
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
        output_type: type[OutputT] | OutputType[OutputT] | None = None,
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

    # --- public entry points ------------------------------------------------------------

    async def run(
        self,
        prompt: str | Sequence[Message],
        *,
        deps: DepsT | None = None,
        run_id: str | None = None,
    ) -> RunResult[OutputT]:
        """Run until a final answer or a bound; never raises for model or tool failures."""
        history = [Message.user(prompt)] if isinstance(prompt, str) else list(prompt)
        run = _Run(run_id or secrets.token_hex(16), history, Budget(self.limits), self._deps(deps))
        run.call_ids.update(c.id for m in history for c in m.tool_calls)
        return await self._drive(run, None, ())

    async def resume(
        self,
        state: RunState | str,
        decisions: Iterable[Decision] = (),
        *,
        deps: DepsT | None = None,
    ) -> RunResult[OutputT]:
        """Continue a run that was awaiting approval, applying the human's decisions.

        A decision must come from this run, name a pending call and carry the hash of its
        exact arguments; anything else raises :class:`~tether.errors.StateError` and runs nothing.
        """
        if isinstance(state, str):
            state = RunState.from_json(state)
        if not state.pending:
            raise StateError(f"run {state.run_id} is not awaiting approval")
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
                raise StateError(
                    f"the decision for call {d.call_id!r} was made for other arguments"
                )
            chosen[d.call_id] = d
        run = _Run(
            state.run_id,
            list(state.transcript),
            Budget(self.limits, state.elapsed_seconds),
            self._deps(deps),
            state.usage,
            state.turns,
            state.consecutive_errors,
        )
        run.call_ids.update(c.id for m in run.history for c in m.tool_calls)
        return await self._drive(run, chosen, state.ready_results)

    def as_tool(self, name: str, description: str) -> Tool:
        """This agent as a tool of another: a fresh history per call, its own limits and
        tools; it returns only its conclusion, and its usage rolls up into the caller's."""
        from tether.context.subagent import SubAgentTool

        return SubAgentTool(self, name, description)

    def run_sync(self, prompt: str | Sequence[Message], **kwargs: Any) -> RunResult[OutputT]:
        """:meth:`run` for code that has no event loop."""
        return asyncio.run(self.run(prompt, **kwargs))

    # --- the loop -----------------------------------------------------------------------

    async def _drive(
        self,
        run: _Run,
        decisions: Mapping[str, Decision] | None,
        ready: Sequence[ToolResult],
    ) -> RunResult:
        emit = run.emit = self._emitter()
        if emit:
            emit(RunStarted(run.run_id))
        invoker = Invoker(self.tools, self.limits, emit)
        deadline = _deadline(run.budget)
        try:
            if deadline is None:
                result = await self._loop(run, invoker, decisions, ready)
            else:
                async with asyncio.timeout(deadline):
                    result = await self._loop(run, invoker, decisions, ready)
        except TimeoutError:
            self._close_open_calls(run, "Not executed: the run's wall-time limit was reached.")
            result = self._finish(
                run, Outcome("budget_exceeded", "wall-time limit reached", "max_wall_seconds")
            )
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            self._close_open_calls(run, NOT_EXECUTED_CANCELLED)
            result = self._finish(run, Outcome("cancelled", "the run was cancelled"))
        if emit:
            emit(RunFinished(result.outcome))
        return result

    async def _loop(
        self,
        run: _Run,
        invoker: Invoker,
        decisions: Mapping[str, Decision] | None,
        ready: Sequence[ToolResult],
    ) -> RunResult:
        if decisions is not None:
            calls = run.history[-1].tool_calls
            stop = await self._run_calls(run, invoker, calls, decisions, ready)
            if stop is not None:
                return stop
        while True:
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
                stop = await self._run_calls(run, invoker, calls, None, ())
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
            if self.stream and emit:
                response = await self._streamed(run, emit)
            else:
                response = await self.client.complete(run.history, self.specs, self.options)
        except ContextWindowExceeded as exc:
            return self._finish(run, Outcome("context_exceeded", str(exc)))
        except ProviderError as exc:
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

    async def _streamed(self, run: _Run, emit: Any) -> ChatResponse:
        final: ChatResponse | None = None
        async for chunk in self.client.stream(run.history, self.specs, self.options):
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
        if stop.truncated:
            self._close_open_calls(run, NOT_EXECUTED_TRUNCATED)
            return self._finish(
                run,
                Outcome("truncated", f"the reply hit the output token limit ({stop.raw})"),
            )
        if stop.refused:
            self._close_open_calls(run, "Not executed: the model refused.")
            return self._finish(run, Outcome("refused", f"the model refused ({stop.raw})"))
        if stop.context_exceeded:
            self._close_open_calls(run, "Not executed: the context window is full.")
            return self._finish(run, Outcome("context_exceeded", "the context window is full"))
        if calls or stop.paused:
            return None
        if self.answers is None:
            return self._finish(run, Outcome("completed", "final answer"))
        return self._typed_answer(run, message)

    def _typed_answer(self, run: _Run, message: Message) -> RunResult | None:
        """Validate the final answer into the output type; re-ask, or end the run."""
        assert self.answers is not None
        verdict = self.answers.read(message, run.answer_reasks)
        if isinstance(verdict, Valid):
            return self._finish(run, Outcome("completed", "final answer"), value=verdict.value)
        if isinstance(verdict, Invalid):
            return self._finish(run, verdict.outcome)
        assert isinstance(verdict, Reask)
        run.answer_reasks += 1
        self._append(run, verdict.message)
        return None

    async def _run_calls(
        self,
        run: _Run,
        invoker: Invoker,
        calls: list[ToolCall],
        decisions: Mapping[str, Decision] | None,
        ready: Sequence[ToolResult],
    ) -> RunResult | None:
        done = {r.call_id: r for r in ready} if ready else {}
        todo = [c for c in calls if c.id not in done] if done else calls
        deps, run_id, turn, usage = run.deps, run.run_id, run.turns, run.usage

        def add_usage(extra: Usage) -> None:
            run.usage = run.usage + extra

        def make_ctx(call: ToolCall) -> RunContext[Any]:
            return RunContext(deps, run_id, call, turn, usage, add_usage)

        outcome = await invoker.run_turn(todo, make_ctx, run.turns, decisions)
        if not done and not outcome.pending:  # the common case: every call ran just now
            return self._record_results(run, outcome.results)  # type: ignore[arg-type]
        for call, result in zip(todo, outcome.results, strict=True):
            if result is not None:
                done[call.id] = result
        if outcome.pending:
            state = RunState(
                run.run_id,
                tuple(run.history),
                run.usage,
                run.turns,
                run.consecutive_errors,
                run.budget.elapsed(),
                tuple(outcome.pending),
                tuple(done[c.id] for c in calls if c.id in done),
            )
            names = ", ".join(f"{p.tool} ({p.call_id})" for p in outcome.pending)
            return self._finish(
                run, Outcome("awaiting_approval", f"waiting for approval of {names}"), state
            )
        return self._record_results(run, [done[c.id] for c in calls])

    def _record_results(self, run: _Run, results: list[ToolResult]) -> RunResult | None:
        """Append one turn's results; end the run after too many all-failing turns."""
        self._append(run, Message("tool", tuple(results)))
        for r in results:
            if not r.is_error:
                run.consecutive_errors = 0
                return None
        if results:
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

    def _normalise(self, run: _Run, message: Message) -> tuple[Message, list[ToolCall]]:
        """An assistant message that can enter the history (no empty text, no stray
        results, every call id present and unique in the run) and its calls."""
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

    def _close_open_calls(self, run: _Run, text: str) -> None:
        """Give every unanswered call of the last message an error result."""
        if not run.history or run.history[-1].role != "assistant":
            return
        calls = run.history[-1].tool_calls
        if calls:
            self._append(run, Message.results(ToolResult(c.id, text, True) for c in calls))

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


def _renamed(call: ToolCall, run: _Run) -> ToolCall:
    base = call.id or f"call_{run.run_id[:8]}"
    n = 2
    while f"{base}_{n}" in run.call_ids:
        n += 1
    return ToolCall(f"{base}_{n}", call.name, call.arguments, call.raw_arguments)


def _deadline(budget: Budget) -> float | None:
    """Seconds left for ``asyncio.timeout`` (``None``: no wall-time limit)."""
    remaining = budget.remaining_seconds()
    return None if remaining is None else max(remaining, 0.0)
