"""Replaying: a cassette drives the run; the first difference is reported with a diff."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tether.clients import BaseChatClient, ChatClient, ChatOptions, ChatResponse, OutputSchema
from tether.errors import ReplayDivergence, ToolFailure
from tether.messages import Message, ToolCall, message_from_dict
from tether.replay._tape import Tape, call_of, outcome_dict, raised
from tether.replay.cassette import (
    Cassette,
    common_prefix,
    digest,
    error_from_dict,
    request_record,
    response_from_dict,
    spec_from_dict,
)
from tether.tools import DelegatingTool, RunContext, Tool, ToolSpec

if TYPE_CHECKING:
    from tether.loop import Agent
    from tether.outcomes import RunResult


# --- replaying ------------------------------------------------------------------------------


class Replayer(Tape):
    """Drives a run from ``cassette`` and keeps the first divergence in ``divergence``."""

    def __init__(
        self,
        cassette: Cassette,
        *,
        stub_tools: bool = False,
        secrets: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(cassette, secrets, environ)
        self.stub_tools = stub_tools
        self.divergence: ReplayDivergence | None = None
        kinds = ("response", "error")
        replies = {i["turn"]: i for i in cassette.interactions if i["type"] in kinds}
        self._requests = [(r, replies.get(r["turn"])) for r in cassette.requests()]
        self._tool_events = {i["call"]: i for i in cassette.interactions if i["type"] == "tool"}
        self._calls_made: set[str] = set()
        self._history: list[dict[str, Any]] = []
        self._tools: list[dict[str, Any]] = []
        self._options: dict[str, Any] = {}

    def client(self, inner: ChatClient | None = None) -> ChatClient:
        """The client that answers from the cassette (``inner`` is never called)."""
        return _ReplayClient(self)

    def tools(self, tools: Iterable[Tool]) -> list[Tool]:
        """Each tool wrapped so that its calls are checked against the cassette."""
        return [_CheckedTool(t, self) for t in tools]

    def recorded_tools(self) -> list[Tool]:
        """Stand-ins for the recorded tools (specs and results from the cassette)."""
        specs: dict[str, ToolSpec] = {}
        for request, _ in self._requests:
            for data in request.get("tools") or ():
                specs[data["name"]] = spec_from_dict(data)
        return [_CheckedTool(_Absent(spec), self, stub=True) for spec in specs.values()]

    def tool_step(self, call: ToolCall, result: str, is_error: bool, turn: int) -> None:
        """Check a workflow's tool step against the cassette."""
        recorded = self._recorded_call(call, turn)
        self._compare_result(call, turn, recorded, {"result": result, "is_error": is_error})

    def verify(self, result: Any = None) -> None:
        """Raise the first divergence; then any request or call recorded but not made; then
        a different ending (outcome kind, final transcript) when ``result`` is given."""
        if self.divergence is not None:
            raise self.divergence
        if self.turn < len(self._requests):
            raise ReplayDivergence(
                f"turn {self.turn + 1}",
                f"the run made {self.turn} model request(s); the cassette has "
                f"{len(self._requests)}",
                turn=self.turn + 1,
            )
        missing = [e for c, e in self._tool_events.items() if c not in self._calls_made]
        if missing:
            e = missing[0]
            raise ReplayDivergence(
                f"turn {e['turn']}, call {e['call']} ({e['name']})",
                "this call was recorded but not made in the replay",
                turn=int(e["turn"]),
                call=str(e["call"]),
            )
        recorded = self.cassette.outcome
        if result is None or recorded is None:
            return
        now = self.redactor.value(outcome_dict(result))
        if now["kind"] != recorded.get("kind"):
            raise ReplayDivergence(
                "the outcome", _diff(recorded.get("kind"), now["kind"]), turn=self.turn
            )
        if "transcript" in recorded and now.get("transcript") != recorded["transcript"]:
            raise ReplayDivergence(
                "the final transcript",
                _diff(recorded["transcript"], now.get("transcript")),
                turn=self.turn,
            )

    def _diverge(self, divergence: ReplayDivergence) -> ReplayDivergence:
        if self.divergence is None:
            self.divergence = divergence
        return divergence

    def _answer(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        self.turn += 1
        turn = self.turn
        if turn > len(self._requests):
            raise self._diverge(
                ReplayDivergence(
                    f"turn {turn}",
                    f"the run made a request the cassette does not have (it has {turn - 1})",
                    turn=turn,
                )
            )
        request, reply = self._requests[turn - 1]
        self._history = self._history[: int(request.get("keep", 0))] + list(request["new"])
        self._tools = request.get("tools", self._tools)
        self._options = request.get("options", self._options)
        now = request_record(self.redactor, messages, tools, options)
        if now.digest != request["digest"]:
            raise self._diverge(self._request_difference(turn, now, request["digest"]))
        if reply is None:
            raise self._diverge(
                ReplayDivergence(
                    f"turn {turn}", "the cassette has no reply to this request", turn=turn
                )
            )
        if reply["type"] == "error":
            raise error_from_dict(reply["error"])
        return response_from_dict(reply["response"])

    def _request_difference(self, turn: int, now: Any, recorded_digest: str) -> ReplayDivergence:
        for key in sorted(set(self._options) | set(now.options)):
            if self._options.get(key) != now.options.get(key):
                before, after = self._options.get(key), now.options.get(key)
                return ReplayDivergence(
                    f"turn {turn}: the request's {key}", _diff(before, after), turn=turn
                )
        if self._tools != now.tools:
            names = ([t["name"] for t in self._tools], [t["name"] for t in now.tools])
            detail = _diff(self._tools, now.tools) if names[0] == names[1] else _diff(*names)
            return ReplayDivergence(f"turn {turn}: the tools offered", detail, turn=turn)
        recorded, actual = self._history, now.history
        index = common_prefix(recorded, actual)
        if index == len(recorded) == len(actual):
            own = digest({"o": self._options, "t": self._tools, "h": self._history})
            why = "" if own == recorded_digest else " (the cassette was edited: record it again)"
            return ReplayDivergence(f"turn {turn}", f"the request digest differs{why}", turn=turn)
        before = recorded[index] if index < len(recorded) else None
        after = actual[index] if index < len(actual) else None
        return _message_difference(turn, index, before, after, actual)

    def _recorded_call(self, call: ToolCall, turn: int) -> dict[str, Any]:
        where = f"turn {turn}, call {call.id} ({call.name})"
        recorded = self._tool_events.get(call.id)
        if recorded is None or recorded["name"] != call.name:
            raise self._diverge(
                ReplayDivergence(where, "this call is not in the cassette", turn=turn, call=call.id)
            )
        self._calls_made.add(call.id)
        arguments = self.redactor.value(dict(call.arguments))
        if arguments != recorded["arguments"]:
            keys = sorted(set(arguments) | set(recorded["arguments"]))
            first = next(k for k in keys if arguments.get(k) != recorded["arguments"].get(k))
            raise self._diverge(
                ReplayDivergence(
                    f"{where}, argument {first!r}",
                    _diff(recorded["arguments"], arguments),
                    turn=turn,
                    call=call.id,
                )
            )
        return recorded

    def _compare_result(
        self, call: ToolCall, turn: int, recorded: Mapping[str, Any], now: Mapping[str, Any]
    ) -> None:
        now = self.redactor.value(dict(now))
        keys = ("result", "is_error", "raised", "error_type", "message")
        before = {k: recorded[k] for k in keys if k in recorded}
        after = {k: now[k] for k in keys if k in now}
        if before != after:
            raise self._diverge(
                ReplayDivergence(
                    f"turn {turn}, call {call.id} ({call.name}): the result",
                    _diff(before, after),
                    turn=turn,
                    call=call.id,
                )
            )


def _message_difference(
    turn: int,
    index: int,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
    history: list[dict[str, Any]],
) -> ReplayDivergence:
    message = after or before or {}
    if message.get("role") == "tool" and before and after:
        old = {p.get("call_id"): p for p in before.get("parts", [])}
        for part in after.get("parts", []):
            call_id = part.get("call_id")
            if old.get(call_id) != part:
                name = _call_name(history, index, call_id)
                return ReplayDivergence(
                    f"turn {turn - 1}, call {call_id} ({name}): its result, as sent in request "
                    f"{turn}",
                    _diff(old.get(call_id), part),
                    turn=turn - 1,
                    call=call_id,
                )
    role = message.get("role", "?")
    return ReplayDivergence(
        f"turn {turn}: message {index + 1} of the history ({role})",
        _diff(before, after),
        turn=turn,
    )


def _call_name(history: list[dict[str, Any]], index: int, call_id: Any) -> str:
    for part in history[index - 1].get("parts", []) if index else []:
        if part.get("id") == call_id:
            return str(part.get("name"))
    return "?"


def _diff(before: Any, after: Any) -> str:
    def lines(value: Any) -> list[str]:
        if isinstance(value, str):
            return value.splitlines() or [""]
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()

    return "\n".join(
        difflib.unified_diff(lines(before), lines(after), "recorded", "replay", lineterm="")
    )


class _ReplayClient(BaseChatClient):
    provider_name = "replay"

    def __init__(self, replayer: Replayer) -> None:
        self._replayer = replayer

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        return self._replayer._answer(messages, tools, options)


class _Absent(Tool):
    """A recorded tool whose code is not here (replay from the cassette alone)."""

    def __init__(self, spec: ToolSpec) -> None:
        self.spec = spec

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        raise ToolFailure(f"the tool {self.spec.name!r} is not available in this replay")


class _CheckedTool(DelegatingTool):
    def __init__(self, inner: Tool, replayer: Replayer, *, stub: bool | None = None) -> None:
        super().__init__(inner)
        self._replayer = replayer
        self._stub = replayer.stub_tools if stub is None else stub

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        call = call_of(self, arguments, ctx)
        recorded = self._replayer._recorded_call(call, ctx.turn)
        if self._stub:
            if "raised" not in recorded:
                return str(recorded.get("result", ""))
            if recorded["raised"] == "ToolFailure":
                raise ToolFailure(str(recorded.get("message", "")))
            raise RuntimeError(str(recorded.get("message", "")))
        try:
            text = await self.inner.invoke(arguments, ctx)
        except Exception as exc:
            self._replayer._compare_result(call, ctx.turn, recorded, raised(exc))
            raise
        self._replayer._compare_result(call, ctx.turn, recorded, {"result": text})
        return text


# --- from the cassette alone (``tether replay FILE``) ---------------------------------------


def options_from_dict(data: Mapping[str, Any]) -> ChatOptions:
    """Request options as recorded (``extra`` as recorded, redacted)."""
    schema = data.get("output_schema")
    return ChatOptions(
        instructions=data.get("instructions"),
        max_output_tokens=data.get("max_output_tokens"),
        temperature=data.get("temperature"),
        model=data.get("model"),
        extra=dict(data.get("extra") or {}),
        output_schema=None
        if not schema
        else OutputSchema(schema["name"], schema["schema"], schema.get("description")),
    )


async def replay_agent_run(
    cassette: Cassette, listeners: Iterable[Any] = ()
) -> tuple[RunResult, Replayer]:
    """Run the recorded agent again from the cassette alone: its prompt, options and tool
    specs, the recorded responses, each tool stubbed with its recorded result."""
    from tether.limits import Limits
    from tether.loop import Agent

    replayer = Replayer(cassette, stub_tools=True)
    requests = cassette.requests()
    if not requests:
        raise ReplayDivergence("turn 1", "the cassette holds no request")
    first = requests[0]
    max_turns = int((cassette.meta.get("limits") or {}).get("max_turns") or len(requests))
    agent: Agent[Any] = Agent(
        replayer.client(),
        replayer.recorded_tools(),
        options=options_from_dict(first.get("options") or {}),
        limits=Limits(max_turns=max(max_turns, 1)),
        listeners=listeners,
    )
    prompt = [message_from_dict(m) for m in first["new"]]
    return await agent.run(prompt), replayer
