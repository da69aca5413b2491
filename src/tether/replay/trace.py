"""A cassette read back as a trace, and its self-check, for ``tether replay FILE``."""

from __future__ import annotations

import json
from typing import Any

from tether.errors import ReplayDivergence
from tether.replay.cassette import Cassette, digest

_WIDTH = 200


def check_digests(cassette: Cassette) -> None:
    """Raise :class:`~tether.errors.ReplayDivergence` if a request's stored history does
    not match its digest (a cassette edited by hand, or cut short)."""
    history: list[Any] = []
    tools: Any = []
    options: Any = {}
    for request in cassette.requests():
        history = history[: int(request.get("keep", 0))] + list(request["new"])
        tools = request.get("tools", tools)
        options = request.get("options", options)
        if digest({"o": options, "t": tools, "h": history}) != request["digest"]:
            turn = int(request["turn"])
            raise ReplayDivergence(
                f"turn {turn}",
                "the stored request does not match its digest: the cassette was edited; "
                "record it again",
                turn=turn,
            )


def is_agent_run(cassette: Cassette) -> bool:
    """Whether the cassette holds an agent's run, which ``tether replay`` can run again: so
    marked, or (cassettes of the pytest fixture's ``client()``/``tools()``) unmarked with
    requests and a final transcript."""
    kind = cassette.meta.get("kind")
    if kind is not None:
        return bool(kind == "agent")
    outcome = cassette.outcome or {}
    return "transcript" in outcome and bool(cassette.requests())


def trace_lines(cassette: Cassette) -> list[str]:
    """One line per request, reply and tool result, in the order they happened."""
    lines: list[str] = []
    for item in cassette.interactions:
        kind = item["type"]
        if kind == "request":
            lines.append(f"turn {item['turn']}: request ({len(item['new'])} new message(s))")
        elif kind == "response":
            response = item["response"]
            for message in response["messages"]:
                for part in message["parts"]:
                    if part["kind"] == "text":
                        lines.append(f"  reply: {_short(part['text'])}")
                    elif part["kind"] == "tool_call":
                        arguments = json.dumps(part["arguments"], ensure_ascii=False)
                        lines.append(f"  call {part['name']}({_short(arguments)}) [{part['id']}]")
            lines.append(f"  stop: {response['stop_reason']['value']}")
        elif kind == "error":
            error = item["error"]
            lines.append(f"  error: {error['kind']}: {_short(error['message'])}")
        else:
            if "raised" in item:
                shown = f"raised {item.get('error_type', item['raised'])}: {item['message']}"
            else:
                shown = str(item.get("result", ""))
            lines.append(f"  result {item['name']} [{item['call']}]: {_short(shown)}")
    if cassette.outcome:
        lines.append(f"outcome: {cassette.outcome['kind']} ({cassette.outcome['reason']})")
    return lines


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _WIDTH else text[: _WIDTH - 3] + "..."
