"""The rules a history must follow before any provider sees it.

Every provider enforces some of these with a 400; tether enforces all of them before the
request is sent:

- the history starts with a user message and is not empty;
- an assistant message is not empty and has no empty text part;
- every tool call id is non-empty and unique in the whole history;
- an assistant message with calls is followed at once by a ``tool`` message holding
  exactly one result for each of its calls (no missing, no extra, no duplicate), and
  nothing but results;
- a ``tool`` message appears only right after an assistant message with calls.

:func:`check` is pure. :class:`HistoryChecker` gives the same answer incrementally: it only
reads messages it has not seen, so checking before each request costs the same on turn 200
as on turn 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tether.errors import InvalidHistoryError
from tether.messages import Message, Text, ToolResult


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule, at message ``index``."""

    index: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"message {self.index}: {self.rule}: {self.detail}"


class HistoryChecker:
    """Checks a growing history, reading each message once.

    If the history it is given is not an extension of the one it saw last (a message was
    replaced or removed), it starts again from the beginning.
    """

    __slots__ = ("_first", "_last", "_n", "_pending", "_seen_ids", "_violations")

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._n = 0
        self._first: Message | None = None
        self._last: Message | None = None
        self._seen_ids: set[str] = set()
        self._pending: list[str] | None = None
        self._violations: list[Violation] = []

    def check(self, history: Sequence[Message], *, final: bool = True) -> list[Violation]:
        """Return the violations of ``history``.

        ``final=True`` (before a request) also flags calls still waiting for results.
        The history is taken as an extension of the last one checked when it is at least
        as long and starts and continues with the same message objects; otherwise it is
        read again from the start.
        """
        n = self._n
        size = len(history)
        if n and (size < n or history[n - 1] is not self._last or history[0] is not self._first):
            self._reset()
            n = 0
        if size == 0:
            return [Violation(0, "empty", "a request needs at least one message")]
        read = self._read
        for i in range(n, size):
            read(i, history[i])
        self._n = size
        self._first = history[0]
        self._last = history[-1]
        if not self._violations and not (final and self._pending):
            return []
        out = list(self._violations)
        if final and self._pending:
            out.append(Violation(size, "orphan call", f"calls {self._pending} have no results"))
        return out

    def _read(self, i: int, message: Message) -> None:
        bad = self._violations.append
        if i == 0 and message.role != "user":
            bad(Violation(0, "first message", f"must be a user message, not {message.role}"))
        if self._pending is not None:
            pending, self._pending = self._pending, None
            if message.role == "tool":
                self._read_results(i, message, pending)
                return
            bad(Violation(i, "orphan call", f"calls {pending} are not answered next"))
        if message.role == "tool":
            bad(Violation(i, "orphan result", "a tool message must follow calls"))
            return
        if message.role == "user":
            if any(isinstance(p, ToolResult) for p in message.parts):
                bad(Violation(i, "misplaced result", "results belong in a tool message"))
            return
        self._read_assistant(i, message)

    def _read_assistant(self, i: int, message: Message) -> None:
        bad = self._violations.append
        if not message.parts:
            bad(Violation(i, "empty message", "an assistant message needs content"))
        ids: list[str] = []
        for part in message.parts:
            if isinstance(part, Text):
                if not part.text:
                    bad(Violation(i, "empty text", "text parts must not be empty"))
            elif isinstance(part, ToolResult):
                bad(Violation(i, "misplaced result", "results belong in a tool message"))
            else:
                if not part.id:
                    bad(Violation(i, "empty id", f"call to {part.name} has no id"))
                elif part.id in self._seen_ids:
                    bad(Violation(i, "duplicate id", f"call id {part.id} is used twice"))
                self._seen_ids.add(part.id)
                ids.append(part.id)
        if ids:
            self._pending = ids

    def _read_results(self, i: int, message: Message, pending: list[str]) -> None:
        parts = message.parts
        if len(parts) == len(pending):  # the common case: one result per call, in order
            for part, call_id in zip(parts, pending, strict=True):
                if type(part) is not ToolResult or part.call_id != call_id:
                    break
            else:
                return
        bad = self._violations.append
        got: list[str] = []
        for part in message.parts:
            if not isinstance(part, ToolResult):
                bad(Violation(i, "not a result", "a tool message holds only results"))
            else:
                got.append(part.call_id)
        expected = set(pending)
        if len(got) != len(set(got)):
            bad(Violation(i, "duplicate result", "a call has more than one result"))
        missing = [c for c in pending if c not in got]
        extra = [c for c in got if c not in expected]
        if missing:
            bad(Violation(i, "orphan call", f"calls {missing} have no results"))
        if extra:
            bad(Violation(i, "orphan result", f"results {extra} answer no call"))


def check(history: Sequence[Message], *, final: bool = True) -> list[Violation]:
    """The violations of ``history`` (empty when it is valid)."""
    return HistoryChecker().check(history, final=final)


def ensure_valid(history: Sequence[Message]) -> None:
    """Raise :class:`InvalidHistoryError` if ``history`` breaks a rule."""
    violations = check(history)
    if violations:
        raise InvalidHistoryError(violations)
