"""Limits: frozen data saying how far a run may go, and the budget that watches them.

Every field is a bound the loop enforces; reaching one ends the run with a typed outcome.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tether.errors import ConfigError
from tether.messages import Usage


@dataclass(frozen=True, slots=True)
class Pricing:
    """Prices in currency units per million tokens, to turn usage into cost."""

    input: float
    output: float
    cache_read: float = 0.0
    cache_write: float = 0.0

    def cost(self, usage: Usage) -> float:
        """The cost of ``usage``."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
        ) / 1_000_000


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds of one run. ``None`` means unbounded for that dimension."""

    max_turns: int = 20
    """Model requests per run; reaching it ends the run with ``turn_cap``."""
    max_input_tokens: int | None = None
    """Input tokens (cached included) summed over the run's requests."""
    max_output_tokens: int | None = None
    """Output tokens summed over the run's requests."""
    max_total_tokens: int | None = None
    """Input plus output tokens summed over the run's requests."""
    max_cost: float | None = None
    """Spend ceiling, computed with ``pricing``."""
    pricing: Pricing | None = None
    """How to turn usage into cost; required with ``max_cost``."""
    max_wall_seconds: float | None = None
    """Wall-clock time of the whole run, model and tools included."""
    max_consecutive_errors: int = 3
    """Turns in a row whose every tool call failed before the run ends as ``failed``."""
    max_concurrency: int = 8
    """Tool calls of one turn that run at the same time."""
    tool_timeout_seconds: float | None = None
    """Per-call time limit; a call past it gets an error result."""
    max_result_chars: int | None = 50_000
    """Longest tool result kept in the history (about 12,000 tokens); longer ones are cut
    with a notice saying how much was left out. Tools should page their own output
    (``tether.context.paging``); this is the backstop. ``None``: no cap."""
    detailed_errors: bool = False
    """Show exception text to the model (it may hold paths, SQL or secrets)."""

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ConfigError("Limits.max_turns must be at least 1")
        if self.max_consecutive_errors < 1:
            raise ConfigError("Limits.max_consecutive_errors must be at least 1")
        if self.max_concurrency < 1:
            raise ConfigError("Limits.max_concurrency must be at least 1")
        if self.max_cost is not None and self.pricing is None:
            raise ConfigError("Limits.max_cost needs Limits.pricing to compute a cost")


class Budget:
    """Watches a run's spend against its limits; says which one is exhausted."""

    __slots__ = ("_deadline", "limits", "started")

    def __init__(self, limits: Limits, elapsed: float = 0.0) -> None:
        self.limits = limits
        self.started = time.monotonic() - elapsed
        wall = limits.max_wall_seconds
        self._deadline = None if wall is None else self.started + wall

    def elapsed(self) -> float:
        """Seconds since the run started (including time before a resume)."""
        return time.monotonic() - self.started

    def remaining_seconds(self) -> float | None:
        """Seconds left before the wall-time limit, if there is one."""
        return None if self._deadline is None else self._deadline - time.monotonic()

    def output_allowance(self, usage: Usage) -> int | None:
        """The most output tokens the next request may ask for, so that ``max_output_tokens``
        and ``max_total_tokens`` hold as hard caps; ``None`` when neither is set."""
        lim = self.limits
        left = [
            limit - used
            for limit, used in (
                (lim.max_output_tokens, usage.output_tokens),
                (lim.max_total_tokens, usage.total_tokens),
            )
            if limit is not None
        ]
        return max(min(left), 1) if left else None

    def overshoot(self, usage: Usage, *, truncated: bool = False) -> tuple[str, str] | None:
        """After a reply: the limit the usage the provider reported went past (or reached,
        when the reply was cut by the allowance) and a reason with the figures."""
        lim = self.limits
        inputs = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        for name, limit, used, cut in (
            ("max_input_tokens", lim.max_input_tokens, inputs, False),
            ("max_output_tokens", lim.max_output_tokens, usage.output_tokens, truncated),
            ("max_total_tokens", lim.max_total_tokens, usage.total_tokens, truncated),
        ):
            if limit is not None and (used > limit or (cut and used >= limit)):
                return name, f"{name} exceeded: {used} tokens used of {limit}"
        if lim.max_cost is not None and lim.pricing is not None:
            cost = lim.pricing.cost(usage)
            if cost > lim.max_cost:
                return "max_cost", f"max_cost exceeded: {cost:.6g} spent of {lim.max_cost:.6g}"
        return None

    def exhausted(self, usage: Usage) -> str | None:
        """The name of the first exhausted limit, or ``None``."""
        lim = self.limits
        inputs = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        if lim.max_input_tokens is not None and inputs >= lim.max_input_tokens:
            return "max_input_tokens"
        if lim.max_output_tokens is not None and usage.output_tokens >= lim.max_output_tokens:
            return "max_output_tokens"
        if lim.max_total_tokens is not None and usage.total_tokens >= lim.max_total_tokens:
            return "max_total_tokens"
        if (
            lim.max_cost is not None
            and lim.pricing is not None
            and lim.pricing.cost(usage) >= lim.max_cost
        ):
            return "max_cost"
        if self._deadline is not None and time.monotonic() >= self._deadline:
            return "max_wall_seconds"
        return None
