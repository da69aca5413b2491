"""The history validator: every rule caught, valid histories pass, incremental = full."""

from __future__ import annotations

import pytest

from tether.errors import InvalidHistoryError
from tether.history import HistoryChecker, check, ensure_valid
from tether.messages import Message, Text, ToolCall, ToolResult

U = Message.user("question")


def calls(*ids: str) -> Message:
    return Message("assistant", tuple(ToolCall(i, "t", {}) for i in ids))


def results(*ids: str) -> Message:
    return Message.results(ToolResult(i, "ok") for i in ids)


def rules(history: list[Message]) -> set[str]:
    return {v.rule for v in check(history)}


def test_valid_history_passes() -> None:
    history = [U, calls("a", "b"), results("b", "a"), Message.assistant("done")]
    assert check(history) == []
    ensure_valid(history)


def test_empty_history() -> None:
    assert rules([]) == {"empty"}


def test_first_message_must_be_user() -> None:
    assert "first message" in rules([Message.assistant("hi")])


def test_orphan_call_at_the_end_and_in_the_middle() -> None:
    assert rules([U, calls("a")]) == {"orphan call"}
    assert "orphan call" in rules([U, calls("a"), Message.user("more")])
    assert "orphan call" in rules([U, calls("a", "b"), results("a")])
    # not final: a pending call at the end is fine while the turn is in progress
    assert check([U, calls("a")], final=False) == []


def test_orphan_and_extra_results() -> None:
    assert "orphan result" in rules([U, results("x")])
    assert "orphan result" in rules([U, calls("a"), results("a", "zzz")])
    assert "duplicate result" in rules([U, calls("a"), results("a", "a")])


def test_results_must_be_alone_in_a_tool_message() -> None:
    mixed = Message("tool", (ToolResult("a", "ok"), Text("and text")))
    assert "not a result" in rules([U, calls("a"), mixed])
    in_user = Message("user", (ToolResult("a", "ok"),))
    assert "misplaced result" in rules([U, calls("a"), in_user])


def test_ids_are_unique_and_present() -> None:
    assert "duplicate id" in rules([U, calls("a", "a"), results("a")])
    assert "duplicate id" in rules([U, calls("a"), results("a"), calls("a"), results("a")])
    assert "empty id" in rules([U, calls(""), results("")])


def test_empty_assistant_content() -> None:
    assert "empty message" in rules([U, Message("assistant", ())])
    assert "empty text" in rules([U, Message.assistant("")])


def test_ensure_valid_raises_with_the_violations() -> None:
    with pytest.raises(InvalidHistoryError, match="orphan call") as info:
        ensure_valid([U, calls("a")])
    assert info.value.violations[0].rule == "orphan call"


def test_incremental_checker_agrees_with_full_check_and_restarts_on_edit() -> None:
    checker = HistoryChecker()
    history: list[Message] = [U]
    assert checker.check(history) == []
    history += [calls("a"), results("a")]
    assert checker.check(history) == []
    history.append(calls("a"))  # duplicate id arrives later
    assert {v.rule for v in checker.check(history)} == {"duplicate id", "orphan call"}
    # the history is edited (not an extension): the checker starts again
    edited = [U, calls("b"), results("b")]
    assert checker.check(edited) == check(edited) == []
    replaced = [U, calls("b"), Message.results([ToolResult("b", "[cleared]")])]
    assert checker.check(replaced) == []
