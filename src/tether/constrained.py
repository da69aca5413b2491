"""Tool calling for models without native tool support, by constrained decoding.

:class:`ConstrainedToolCalling` wraps any client that honours a JSON schema for its output
(``ChatOptions.extra["json_schema"]``, see :data:`JSON_SCHEMA`). For each request it

1. describes the tools in the instructions, in plain text a small model can read;
2. renders the history as text: earlier calls as the JSON the model would have written,
   tool results as a user message naming the tool and its arguments;
3. asks the inner client for one JSON value valid against :func:`reply_schema`: either
   ``{"tool_calls": [{"name": ..., "arguments": {...}}]}`` (each item valid against its
   tool's schema, with ``pattern`` and ``enum`` enforced while decoding) or
   ``{"answer": "..."}``;
4. maps the reply back to ordinary :class:`~tether.messages.ToolCall` and
   :class:`~tether.messages.Text` parts with fresh unique ids, so the loop, the history
   checker and every guard work unchanged.

A reply that is not valid JSON (cut at the token limit, or an inner client that ignored the
schema) never raises: a call keeps its text in ``raw_arguments`` (the loop answers it with
an error or, when truncated, does not run it), and prose becomes an answer.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tether.clients import (
    ChatClient,
    ChatOptions,
    ChatResponse,
    DelegatingChatClient,
    ResponseDone,
    StreamChunk,
    TextDelta,
    ToolChoice,
    tool_choice_of,
)
from tether.messages import Message, Part, Role, StopReason, Text, ToolCall, ToolResult
from tether.tools import ToolSpec

JSON_SCHEMA = "json_schema"
"""Key of ``ChatOptions.extra`` holding a JSON schema the reply must be valid against.

A client that honours it (``LocalClient``, the local server) constrains decoding to the
schema; the reply's text is then one JSON value.
"""

FORMAT_HELP = (
    "Reply with one JSON object and nothing else:\n"
    '- to call tools: {"tool_calls": [{"name": "<tool name>", "arguments": {...}}]}\n'
    '- to answer the user: {"answer": "<your answer>"}\n'
    "Call a tool when you need facts you do not have; answer once the tool results "
    "give you what the user asked."
)
CALL_HELP = (
    "Reply with one JSON object and nothing else, calling tools:\n"
    '{"tool_calls": [{"name": "<tool name>", "arguments": {...}}]}'
)
RESULTS_HELP = (
    'Use these results to answer the user in one sentence with {"answer": ...}, '
    "or call another tool."
)

_NAME_RE = re.compile(r'"name"\s*:\s*"([^"\\]{1,64})"')
_ARGUMENTS_RE = re.compile(r'"arguments"\s*:\s*')


def new_call_id() -> str:
    """A fresh call id, unique across runs (a tool may use it as an idempotency key)."""
    return f"call_{uuid.uuid4().hex[:16]}"


class ConstrainedToolCalling(DelegatingChatClient):
    """Gives tool calling to a client that only supports JSON-schema output.

    ``call_ids`` makes call ids (default: :func:`new_call_id`). ``tool_choice`` is honoured
    by the reply schema: ``required`` leaves out the answer, a tool's name leaves only that
    tool, ``none`` asks for text. ``max_calls`` caps the calls in one reply, in the schema
    (a small model decoding greedily can repeat a call until its token limit; one call per
    reply makes it read each result before it decides again). Requests without tools pass
    through unchanged, their history rendered as text when it holds calls or results.
    """

    def __init__(
        self,
        inner: ChatClient,
        *,
        call_ids: Callable[[], str] = new_call_id,
        max_calls: int | None = None,
    ) -> None:
        super().__init__(inner)
        if max_calls is not None and max_calls < 1:
            raise ValueError("max_calls must be at least 1")
        self._call_ids = call_ids
        self.max_calls = max_calls

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        choice = tool_choice_of(options, tools)
        if not tools or choice == "none":
            return await self.inner.complete(*_as_text(messages, options))
        answer_schema = options.extra.get(JSON_SCHEMA)
        if answer_schema is None and options.output_schema is not None:
            answer_schema = options.output_schema.schema
        extra = dict(options.extra)
        extra[JSON_SCHEMA] = reply_schema(
            tools, answer_schema, tool_choice=choice, max_calls=self.max_calls
        )
        instructions = render_instructions(options.instructions, tools, tool_choice=choice)
        inner_options = replace(
            options, instructions=instructions, extra=extra, output_schema=None, tool_choice=None
        )
        response = await self.inner.complete(render_history(messages), (), inner_options)
        text = response.message.text
        parts, stop = parse_reply(
            text, response.stop_reason, self._call_ids, structured=answer_schema is not None
        )
        message = Message("assistant", tuple(parts), {"constrained_reply": text})
        return replace(response, messages=(message,), stop_reason=stop)

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> AsyncIterator[StreamChunk]:
        if not tools or tool_choice_of(options, tools) == "none":
            async for chunk in self.inner.stream(*_as_text(messages, options)):
                yield chunk
            return
        response = await self.complete(messages, tools, options)
        if response.message.text:
            yield TextDelta(response.message.text)
        yield ResponseDone(response)


def _as_text(
    messages: Sequence[Message], options: ChatOptions
) -> tuple[Sequence[Message], tuple[()], ChatOptions]:
    """A request that wants an answer in text: no tools, and a history with calls or
    results rendered as text the inner client can read."""
    if any(m.tool_calls or m.tool_results for m in messages):
        messages = render_history(messages, json_reply=False)
    return messages, (), replace(options, tool_choice=None)


# --- the schema -----------------------------------------------------------------------------


def reply_schema(
    tools: Sequence[ToolSpec],
    answer: Mapping[str, Any] | None = None,
    *,
    tool_choice: ToolChoice | None = None,
    max_calls: int | None = None,
) -> dict[str, Any]:
    """The JSON schema of a reply: tool calls valid against ``tools``, or an answer
    (a string, or a value valid against ``answer`` when given). ``tool_choice``
    ``required`` leaves out the answer, a tool's name leaves only calls to that tool,
    ``none`` leaves only the answer; ``max_calls`` caps the calls of one reply."""
    if tool_choice not in (None, "auto", "required", "none"):
        tools = [t for t in tools if t.name == tool_choice]
    defs: dict[str, Any] = {}
    calls = []
    for i, spec in enumerate(tools):
        arguments = _hoist_defs(dict(spec.parameters), f"t{i}_", defs)
        calls.append(
            {
                "type": "object",
                "properties": {"name": {"const": spec.name}, "arguments": arguments},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    answer_value = dict(answer) if answer is not None else {"type": "string"}
    if answer is not None:
        answer_value = _hoist_defs(answer_value, "answer_", defs)
    branches: list[dict[str, Any]] = []
    if calls and tool_choice != "none":
        items = calls[0] if len(calls) == 1 else {"anyOf": calls}
        array: dict[str, Any] = {"type": "array", "items": items, "minItems": 1}
        if max_calls is not None:
            array["maxItems"] = max_calls
        branches.append(
            {
                "type": "object",
                "properties": {"tool_calls": array},
                "required": ["tool_calls"],
                "additionalProperties": False,
            }
        )
    if tool_choice in (None, "auto", "none") or not branches:
        branches.append(
            {
                "type": "object",
                "properties": {"answer": answer_value},
                "required": ["answer"],
                "additionalProperties": False,
            }
        )
    schema: dict[str, Any] = {"anyOf": branches}
    if defs:
        schema["$defs"] = defs
    return schema


def _hoist_defs(schema: dict[str, Any], prefix: str, into: dict[str, Any]) -> dict[str, Any]:
    """Move ``$defs`` of a sub-schema to the top, renaming them and their ``$ref``s."""
    local = schema.pop("$defs", None) or schema.pop("definitions", None) or {}
    schema.pop("$schema", None)

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: walk(v) for k, v in node.items()}
            ref = out.get("$ref")
            if isinstance(ref, str):
                for base in ("#/$defs/", "#/definitions/"):
                    if ref.startswith(base):
                        out["$ref"] = f"#/$defs/{prefix}{ref[len(base) :]}"
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    for name, sub in local.items():
        into[f"{prefix}{name}"] = walk(sub)
    result: dict[str, Any] = walk(schema)
    return result


# --- the prompt -----------------------------------------------------------------------------


def render_instructions(
    instructions: str | None, tools: Sequence[ToolSpec], *, tool_choice: ToolChoice | None = None
) -> str:
    """The instructions followed by the tools, described in plain text, and the format."""
    if tool_choice not in (None, "auto", "required", "none"):
        tools = [t for t in tools if t.name == tool_choice]
    lines = [instructions.strip(), ""] if instructions else []
    lines.append("Tools:")
    for spec in tools:
        lines.append(f"- {spec.name}: {' '.join(spec.description.split())}")
        params = spec.parameters.get("properties", {})
        required = set(spec.parameters.get("required", ()))
        for pname, prop in params.items():
            lines.append(f"    {pname} ({_describe_param(prop, pname in required)}")
    lines += ["", FORMAT_HELP if tool_choice in (None, "auto") else CALL_HELP]
    return "\n".join(lines)


def _describe_param(prop: Mapping[str, Any], required: bool) -> str:
    bits = [str(prop.get("type", "any"))]
    if "enum" in prop:
        bits.append("one of " + ", ".join(json.dumps(v) for v in prop["enum"]))
    if "pattern" in prop:
        bits.append(f"pattern {prop['pattern']}")
    if not required:
        bits.append("optional")
    head = ", ".join(bits)
    desc = prop.get("description")
    return f"{head}): {desc}" if desc else f"{head})"


def render_history(messages: Sequence[Message], *, json_reply: bool = True) -> list[Message]:
    """The history as plain user/assistant text messages (same-role neighbours merged).
    ``json_reply=False`` (the reply is to be text): earlier answers stay text and results
    are not followed by a reminder of the JSON reply format."""
    names: dict[str, ToolCall] = {}
    out: list[Message] = []
    for message in messages:
        for call in message.tool_calls:
            names[call.id] = call
        role: Role
        if message.role == "assistant":
            text = _render_assistant(message, json_reply)
            role = "assistant"
        elif message.role == "tool" or message.tool_results:
            text = _render_results(message.tool_results, names, message.text, json_reply)
            role = "user"
        else:
            text = message.text
            role = "user"
        if out and out[-1].role == role:
            text = f"{out[-1].text}\n\n{text}"
            out.pop()
        out.append(Message(role, (Text(text),)))
    return out


def _render_assistant(message: Message, json_reply: bool) -> str:
    calls = message.tool_calls
    if not calls:
        return (
            json.dumps({"answer": message.text}, ensure_ascii=False) if json_reply else message.text
        )
    items = []
    for call in calls:
        args: Any = dict(call.arguments) if not call.malformed else call.raw_arguments
        items.append({"name": call.name, "arguments": args})
    return json.dumps({"tool_calls": items}, ensure_ascii=False)


def _render_results(
    results: Sequence[ToolResult], calls: Mapping[str, ToolCall], text: str, nudge: bool
) -> str:
    lines = ["Tool results:"]
    for result in results:
        call = calls.get(result.call_id)
        head = f"{call.name}({call.arguments_json()})" if call else result.call_id
        status = "ERROR" if result.is_error else "returned"
        lines.append(f"- {head} {status}: {result.content}")
    if text:
        lines.append(text)
    if nudge:
        lines.append(RESULTS_HELP)
    return "\n".join(lines)


# --- the reply ------------------------------------------------------------------------------


def parse_reply(
    text: str,
    stop: StopReason,
    call_ids: Callable[[], str] = new_call_id,
    *,
    structured: bool = False,
) -> tuple[list[Part], StopReason]:
    """Map a JSON reply to parts; never raises. ``structured``: the answer is a JSON value
    kept as JSON text."""
    stripped = text.strip()
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError:
        return _unreadable(stripped, stop, call_ids), stop
    if not isinstance(value, dict) or not ({"tool_calls", "answer"} & value.keys()):
        return ([Text(stripped)] if stripped else []), stop
    parts: list[Part] = []
    answer = value.get("answer")
    if answer is not None:
        if isinstance(answer, str) and not structured:
            parts.append(Text(answer))
        else:
            parts.append(Text(json.dumps(answer, ensure_ascii=False)))
    raw_calls = value.get("tool_calls")
    items = raw_calls if isinstance(raw_calls, list) else [raw_calls] if raw_calls else []
    for item in items:
        parts.append(_call_from(item, call_ids()))
    if any(isinstance(p, ToolCall) for p in parts) and stop.value in ("stop", "end_turn"):
        stop = StopReason("tool_calls", stop.raw)
    return parts, stop


def _call_from(item: Any, call_id: str) -> ToolCall:
    if not isinstance(item, dict):
        return ToolCall(call_id, "", {}, json.dumps(item, ensure_ascii=False))
    name = item.get("name")
    name = name if isinstance(name, str) else ""
    arguments = item.get("arguments", {})
    if isinstance(arguments, dict):
        return ToolCall(call_id, name, arguments)
    if isinstance(arguments, str):
        return ToolCall.from_json(call_id, name, arguments)
    return ToolCall(call_id, name, {}, json.dumps(arguments, ensure_ascii=False))


def _unreadable(text: str, stop: StopReason, call_ids: Callable[[], str]) -> list[Part]:
    """Parts for a reply that is not JSON: a cut-off call, or prose."""
    if text.startswith("{") and '"tool_calls"' in text:
        match = _NAME_RE.search(text)
        # the call's own arguments as far as they go, never the reply's envelope
        start = _ARGUMENTS_RE.search(text, match.end() if match else 0)
        raw = text[start.end() :] if start else ""
        return [ToolCall(call_ids(), match.group(1) if match else "", {}, raw)]
    if text.startswith("{") and '"answer"' in text:
        # a cut-off answer: keep what was said, the stop reason tells it was cut
        return [Text(text)]
    return [Text(text)] if text else []
