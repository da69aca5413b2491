"""Bounds a tool declares and the run enforces: one declaration, read by both.

:class:`Bounded` wraps a tool with quantitative bounds: an argument at most a number or
at most an application value read at call time (:class:`AppValue`, such as what remains
paid on the ticket's own order), and at most ``calls_per_run`` executed calls in one run.
A call outside a bound is denied before anyone is asked (a ``deny`` ruling), and checked
again when it runs (an approval granted earlier cannot outlive a bound the world has since
tightened). The blast-radius report reads the same objects, so the bound it prints and
the bound the run enforces cannot drift apart.

:class:`Refusal` is the base of a wrapper whose only rule is to refuse: the report knows
it can narrow a tool and never widen it (a wrapper overriding ``ruling`` itself is code
the report cannot read).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.errors import ConfigError, ToolFailure
from tether.rulings import Ruling
from tether.tools import DelegatingTool, RunContext, Tool

__all__ = ["AppValue", "AtMost", "Bounded", "Refusal"]

Reader = Callable[[Mapping[str, Any], RunContext[Any]], float | Awaitable[float]]
_COUNTS = "tether.bounds.calls"


@dataclass(frozen=True, slots=True)
class AppValue:
    """A number the application knows at call time (never one the model wrote)."""

    description: str
    """What it is, for a person: ``"what remains paid on the ticket's own order"``."""
    read: Reader
    """Reads it for one call: ``read(arguments, ctx)``, sync or async."""

    async def value(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> float:
        """The value for this call."""
        got = self.read(arguments, ctx)
        if inspect.isawaitable(got):
            got = await got
        return float(got)


@dataclass(frozen=True, slots=True)
class AtMost:
    """``arguments[argument]`` is a number, above ``above`` (when given) and at most
    ``limit``: a constant, or an :class:`AppValue` read at call time."""

    argument: str
    limit: float | AppValue
    unit: str = ""
    """The unit, for a person (``"EUR"``)."""
    above: float | None = None
    """A strict lower bound (``0``: the amount must be positive)."""

    def describe(self) -> str:
        """``amount <= what remains paid ...`` in words."""
        limit = self.limit.description if isinstance(self.limit, AppValue) else f"{self.limit:g}"
        unit = f" {self.unit}" if self.unit and not isinstance(self.limit, AppValue) else ""
        low = f"{self.above:g} < " if self.above is not None else ""
        return f"{low}{self.argument} <= {limit}{unit}"

    async def violation(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str | None:
        """Why the call breaks this bound, or ``None``."""
        value = arguments.get(self.argument)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{self.argument} must be a number"
        if self.above is not None and not value > self.above:
            return f"{self.argument} must be above {self.above:g}"
        if isinstance(self.limit, AppValue):
            limit = await self.limit.value(arguments, ctx)
            what = f"{self.limit.description} ({limit:g}{' ' + self.unit if self.unit else ''})"
        else:
            limit, what = float(self.limit), f"{self.limit:g}{' ' + self.unit if self.unit else ''}"
        if value > limit + 1e-9:
            return f"{self.argument} is {value:g}, above {what}"
        return None


class Refusal(DelegatingTool):
    """A wrapper that can only refuse: override :meth:`refuse`, never ``ruling``.

    ``refuse(arguments, ctx)`` returns why the call is refused, or ``None``; a refusal is a
    final ``deny`` (``rule``), decided before anyone is asked.
    """

    rule = "refusal"

    async def refuse(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str | None:
        """Why this call is refused, or ``None`` to let the inner tool rule."""
        return None

    async def ruling(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> Ruling:
        """``deny`` when :meth:`refuse` says why, else the inner tool's ruling."""
        why = await self.refuse(arguments, ctx)
        if why:
            return Ruling("deny", why, self.rule)
        return await super().ruling(arguments, ctx)


class Bounded(Refusal):
    """``inner`` with declared bounds, enforced on every call (see the module doc)."""

    rule = "bounds"

    def __init__(self, inner: Tool, *amounts: AtMost, calls_per_run: int | None = None) -> None:
        super().__init__(inner)
        params = set(inner.spec.parameters.get("properties", {}))
        for bound in amounts:
            if bound.argument not in params:
                raise ConfigError(f"tool {inner.name}: a bound names unknown {bound.argument!r}")
        if calls_per_run is not None and calls_per_run < 1:
            raise ConfigError(f"tool {inner.name}: calls_per_run must be at least 1")
        if not amounts and calls_per_run is None:
            raise ConfigError(f"Bounded on {inner.name!r} needs a bound")
        self.amounts: tuple[AtMost, ...] = amounts
        self.calls_per_run = calls_per_run

    def calls(self, ctx: RunContext[Any]) -> int:
        """Calls of this tool that ran in this run so far."""
        counts = ctx.memo.get(_COUNTS, {})
        return int(counts.get(self.name, 0)) if isinstance(counts, dict) else 0

    async def refuse(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str | None:
        """The first bound this call breaks, in words; ``None`` when it is within all."""
        if self.calls_per_run is not None and self.calls(ctx) >= self.calls_per_run:
            n = self.calls_per_run
            return f"{self.name} may run at most {n} time{'s' if n > 1 else ''} in a run"
        for bound in self.amounts:
            why = await bound.violation(arguments, ctx)
            if why:
                return why
        return None

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        """Checks the bounds again, counts the call, then runs it."""
        why = await self.refuse(arguments, ctx)
        if why:
            raise ToolFailure(f"Not allowed: {why}.")
        counts = ctx.memo.get(_COUNTS)
        counts = dict(counts) if isinstance(counts, dict) else {}
        counts[self.name] = int(counts.get(self.name, 0)) + 1
        ctx.memo[_COUNTS] = counts  # a new dict: a saved run state's memo stays as it was
        return await self.inner.invoke(arguments, ctx)
