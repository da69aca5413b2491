"""Policies: the tool list is the permission, and rules on arguments are checked in code.

* :func:`allowed_tools` builds a run's tool set from an allow-list over a catalogue. A tool
  left out cannot be called: the loop answers ``Unknown tool``, whatever the model read.
* :class:`ArgumentPolicy` wraps a tool with checks ``check(arguments, ctx) -> None | str``;
  a message is a ``deny`` ruling: the call is ``blocked`` before anything runs and before
  any human is asked (a deny-rule is never put to an approver), and the model reads why.
  :func:`at_most`, :func:`one_of` and :func:`matches` build the common checks; a limit or
  an allowed set may be a function of ``(arguments, ctx)``, read at call time.

A policy narrows what a call may do; it does not replace business rules in the tool itself
(cumulative totals checked in one transaction), which hold whatever the caller.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import Any, TypeAlias, TypeVar

from tether.errors import ConfigError, ToolFailure
from tether.rulings import Ruling
from tether.tools import DelegatingTool, RunContext, Tool

__all__ = [
    "ArgumentPolicy",
    "Check",
    "allowed_tools",
    "at_most",
    "matches",
    "one_of",
]

T = TypeVar("T")
Check: TypeAlias = Callable[
    [Mapping[str, Any], RunContext[Any]], str | Awaitable[str | None] | None
]
Dynamic: TypeAlias = T | Callable[[Mapping[str, Any], RunContext[Any]], T]


def allowed_tools(catalogue: Iterable[Tool], allow: Iterable[str]) -> list[Tool]:
    """The tools of ``catalogue`` named in ``allow``, in allow-list order.

    A name missing from the catalogue raises :class:`~tether.errors.ConfigError`, so a typo
    cannot silently drop (or widen) a permission.
    """
    by_name = {t.name: t for t in catalogue}
    wanted = list(dict.fromkeys(allow))
    missing = [n for n in wanted if n not in by_name]
    if missing:
        raise ConfigError(
            f"the allow-list names tools that do not exist: {', '.join(missing)}; "
            f"known tools are {', '.join(sorted(by_name)) or 'none'}"
        )
    return [by_name[n] for n in wanted]


class ArgumentPolicy(DelegatingTool):
    """Runs ``checks`` before the tool; the first violation refuses the call.

    The refusal reads ``Not allowed: <message>`` and is shown to the model. A check that
    raises also refuses the call (fail closed).
    """

    def __init__(self, inner: Tool, *checks: Check) -> None:
        super().__init__(inner)
        if not checks:
            raise ConfigError(f"ArgumentPolicy on {inner.name!r} needs at least one check")
        self.checks = checks

    async def violation(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str | None:
        """The first violated check's message, or ``None`` when the call is allowed."""
        for check in self.checks:
            try:
                message = check(arguments, ctx)
                if inspect.isawaitable(message):
                    message = await message
            except Exception as exc:
                return f"the policy check failed ({type(exc).__name__})"
            if message:
                return message
        return None

    async def ruling(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> Ruling:
        """``deny`` on the first violated check, before the inner tool's own ruling (so a
        call that needs approval is refused before anyone is asked)."""
        message = await self.violation(arguments, ctx)
        if message:
            return Ruling("deny", message, "argument_policy")
        return await super().ruling(arguments, ctx)

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        """Runs the checks again (a tool called outside a run has had no ruling)."""
        message = await self.violation(arguments, ctx)
        if message:
            raise ToolFailure(f"Not allowed: {message}")
        return await self.inner.invoke(arguments, ctx)


def _resolve(value: Dynamic[T], arguments: Mapping[str, Any], ctx: RunContext[Any]) -> T:
    if callable(value):
        result: T = value(arguments, ctx)
        return result
    return value


def at_most(field: str, limit: Dynamic[float]) -> Check:
    """``arguments[field]`` must be a number no greater than ``limit``."""

    def check(arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str | None:
        value = arguments.get(field)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{field} must be a number"
        bound = _resolve(limit, arguments, ctx)
        if value > bound:
            return f"{field} is {value:g}, above the limit of {bound:g}"
        return None

    return check


def one_of(field: str, allowed: Dynamic[Collection[Any]]) -> Check:
    """``arguments[field]`` must be one of ``allowed`` (e.g. the account's own orders)."""

    def check(arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str | None:
        value = arguments.get(field)
        if value not in _resolve(allowed, arguments, ctx):
            return f"{field} {value!r} is outside what this task may touch"
        return None

    return check


def matches(field: str, pattern: str) -> Check:
    """``arguments[field]`` must be a string matching ``pattern`` in full."""
    compiled = re.compile(pattern)

    def check(arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str | None:
        value = arguments.get(field)
        if not isinstance(value, str) or not compiled.fullmatch(value):
            return f"{field} does not have the allowed form"
        return None

    return check
