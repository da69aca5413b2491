"""Provider wire documents for the scripted server: bodies and their SSE streams.

Each ``*_sse`` function turns a non-streaming body into the documented event stream that
carries the same response, so a test can check that ``stream()`` and ``complete()`` agree.
"""

from __future__ import annotations

import json
from typing import Any

from provider_server import Reply

# --- Anthropic Messages ---------------------------------------------------------------------


def a_text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def a_call(id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": id, "name": name, "input": arguments}


def a_message(
    *content: dict[str, Any],
    stop: str | None = "end_turn",
    usage: dict[str, int] | None = None,
    model: str = "claude-test",
) -> dict[str, Any]:
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(content),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 5},
    }


def _pieces(text: str, n: int = 3) -> list[str]:
    size = max(1, len(text) // n)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def a_sse(message: dict[str, Any]) -> Reply:
    """The Messages stream of ``message``: text and tool input in several deltas."""
    usage = dict(message["usage"])
    start = {**message, "content": [], "stop_reason": None}
    start["usage"] = {**usage, "output_tokens": 1}
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": start}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            first = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": t} for t in _pieces(block["text"])]
        else:
            first = {**block, "input": {}}
            text = json.dumps(block["input"])
            deltas = [{"type": "input_json_delta", "partial_json": t} for t in _pieces(text)]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": first},
            )
        )
        for d in deltas:
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return Reply(events=events)


def a_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


# --- OpenAI Responses -----------------------------------------------------------------------


def r_text(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_1",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def r_call(call_id: str, name: str, arguments: str | dict[str, Any]) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": text,
        "status": "completed",
    }


def r_response(
    *output: dict[str, Any],
    status: str = "completed",
    incomplete: str | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "gpt-test",
        "status": status,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "output": list(output),
        "usage": usage
        or {
            "input_tokens": 20,
            "output_tokens": 7,
            "total_tokens": 27,
            "input_tokens_details": {"cached_tokens": 4},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def r_sse(response: dict[str, Any]) -> Reply:
    """The Responses event stream of ``response``."""
    seq = iter(range(1000))
    empty = {**response, "status": "in_progress", "output": []}

    def ev(kind: str, **data: Any) -> tuple[str, dict[str, Any]]:
        return kind, {"type": kind, "sequence_number": next(seq), **data}

    events = [ev("response.created", response=empty), ev("response.in_progress", response=empty)]
    for index, item in enumerate(response["output"]):
        if item["type"] == "message":
            events.append(
                ev("response.output_item.added", output_index=index, item={**item, "content": []})
            )
            text = item["content"][0]["text"]
            for piece in _pieces(text):
                events.append(
                    ev(
                        "response.output_text.delta",
                        item_id=item["id"],
                        output_index=index,
                        content_index=0,
                        delta=piece,
                        logprobs=[],
                    )
                )
        else:
            events.append(
                ev("response.output_item.added", output_index=index, item={**item, "arguments": ""})
            )
            for piece in _pieces(item["arguments"]):
                events.append(
                    ev(
                        "response.function_call_arguments.delta",
                        item_id=item["id"],
                        output_index=index,
                        delta=piece,
                    )
                )
        events.append(ev("response.output_item.done", output_index=index, item=item))
    final = {"completed": "response.completed", "incomplete": "response.incomplete"}
    events.append(ev(final.get(response["status"], "response.failed"), response=response))
    return Reply(events=list(events))


# --- OpenAI Chat Completions ----------------------------------------------------------------


def c_call(id: str, name: str, arguments: str | dict[str, Any]) -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": id, "type": "function", "function": {"name": name, "arguments": text}}


def c_completion(
    content: str | None = None,
    *calls: dict[str, Any],
    finish: str | None = "stop",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = list(calls)
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "local-test",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage
        or {
            "prompt_tokens": 30,
            "completion_tokens": 9,
            "total_tokens": 39,
            "prompt_tokens_details": {"cached_tokens": 10},
        },
    }


def c_sse(completion: dict[str, Any], *, with_usage: bool = True) -> Reply:
    """The chunk stream of ``completion`` (``data:`` lines, then ``[DONE]``)."""
    base = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "local-test",
    }
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
        return None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events: list[tuple[str | None, Any]] = [chunk({"role": "assistant", "content": ""})]
    for piece in _pieces(message.get("content") or ""):
        if piece:
            events.append(chunk({"content": piece}))
    for index, call in enumerate(message.get("tool_calls") or ()):
        head = {"index": index, "id": call["id"], "type": "function"}
        head["function"] = {"name": call["function"]["name"], "arguments": ""}
        events.append(chunk({"tool_calls": [head]}))
        for piece in _pieces(call["function"]["arguments"]):
            events.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    events.append(chunk({}, choice["finish_reason"]))
    if with_usage:
        events.append((None, {**base, "choices": [], "usage": completion["usage"]}))
    events.append((None, "[DONE]"))
    return Reply(events=events)
