"""Messages: plain values that round-trip through JSON without loss."""

from __future__ import annotations

import json

import pytest

from tether.messages import (
    STOP_KINDS,
    Message,
    StopReason,
    Text,
    ToolCall,
    ToolResult,
    Usage,
    dumps_history,
    loads_history,
    message_from_dict,
    stop_reason_from_dict,
    stop_reason_to_dict,
    usage_from_dict,
    usage_to_dict,
)

ANTHROPIC = [
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop_sequence",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
]
OPENAI = ["stop", "length", "tool_calls", "content_filter"]


def test_every_documented_stop_reason_is_known() -> None:
    for raw in ANTHROPIC + OPENAI:
        reason = StopReason.parse(raw)
        assert reason.value == raw
        assert reason.raw == raw


def test_missing_and_unknown_stop_reasons_keep_the_raw_value() -> None:
    assert StopReason.parse(None).value == "missing"
    assert StopReason.parse("").value == "missing"
    odd = StopReason.parse("brand_new_reason")
    assert (odd.value, odd.raw) == ("unknown", "brand_new_reason")
    assert StopReason.parse("missing").value == "unknown"  # not a provider value


def test_stop_reason_categories() -> None:
    assert StopReason.parse("max_tokens").truncated and StopReason.parse("length").truncated
    assert StopReason.parse("refusal").refused and StopReason.parse("content_filter").refused
    assert StopReason.parse("pause_turn").paused
    assert StopReason.parse("model_context_window_exceeded").context_exceeded
    assert not StopReason.parse("end_turn").truncated
    assert not StopReason.parse(None).truncated


def test_stop_reason_round_trip() -> None:
    for kind in STOP_KINDS:
        reason = StopReason(kind, f"raw-{kind}")  # type: ignore[arg-type]
        assert stop_reason_from_dict(json.loads(json.dumps(stop_reason_to_dict(reason)))) == reason
    with pytest.raises(ValueError, match="unknown stop reason"):
        stop_reason_from_dict({"value": "nope"})


def test_usage_adds_up_and_round_trips() -> None:
    a = Usage(10, 5, 100, 7, 1)
    b = Usage(1, 2, 3, 4, 1)
    total = a + b
    assert total == Usage(11, 7, 103, 11, 2)
    assert total.total_tokens == 11 + 7 + 103 + 11
    assert usage_from_dict(json.loads(json.dumps(usage_to_dict(total)))) == total


def test_malformed_arguments_keep_the_raw_text() -> None:
    call = ToolCall.from_json("c1", "lire_commande", '{"numero": "C-10')
    assert call.malformed
    assert call.arguments == {}
    assert call.raw_arguments == '{"numero": "C-10'
    assert call.arguments_json() == '{"numero": "C-10'
    not_object = ToolCall.from_json("c2", "t", "[1, 2]")
    assert not_object.malformed
    ok = ToolCall.from_json("c3", "t", '{"a": 1}')
    assert not ok.malformed and ok.arguments == {"a": 1}
    assert ToolCall.from_json("c4", "t", "").arguments == {}


def test_history_round_trips_losslessly() -> None:
    history = [
        Message.user("Ou en est ma commande C-1042 ?"),
        Message(
            "assistant",
            (
                Text("Je consulte."),
                ToolCall("toolu_1", "lire_commande", {"numero": "C-1042", "n": [1, {"x": None}]}),
                ToolCall("toolu_2", "lire_commande", {}, raw_arguments="{bad"),
            ),
            {"provider": {"signature": "abc"}},
        ),
        Message.results(
            [ToolResult("toolu_1", '{"statut":"expediee"}'), ToolResult("toolu_2", "bad", True)]
        ),
        Message.assistant("Elle est expediee. é ✓"),
    ]
    assert loads_history(dumps_history(history)) == history


def test_unknown_role_or_part_is_rejected() -> None:
    with pytest.raises(ValueError, match="role"):
        message_from_dict({"role": "system", "parts": []})
    with pytest.raises(ValueError, match="part kind"):
        message_from_dict({"role": "user", "parts": [{"kind": "image"}]})


def test_message_accessors() -> None:
    m = Message.assistant("a", ToolCall("1", "t", {}), "b")
    assert m.text == "ab"
    assert [c.id for c in m.tool_calls] == ["1"]
    assert Message.results([ToolResult("1", "x")]).tool_results[0].content == "x"
