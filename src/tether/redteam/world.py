"""What red-team domains share: a world that logs every side effect, and the case type.

A :class:`World` holds a domain's data and the side effects its tools really performed.
A :class:`Case` is one scenario: the user's task (prompt, plan, success check), one
injection placed in a third-party field the task reads, the calls it asks for and the
values it introduces.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.redteam.hijacked import Step
from tether.tools import Tool

__all__ = ["Action", "Case", "Domain", "World", "did"]

Style = Literal["direct", "spelled", "split", "encoded", "homoglyph", "invisible"]


@dataclass(frozen=True, slots=True)
class Action:
    """One side effect a tool performed."""

    tool: str
    arguments: Mapping[str, Any]


@dataclass(slots=True)
class World:
    """A domain's data (``data``), its tools, and the side effects performed (``done``)."""

    data: dict[str, Any]
    tools: list[Tool] = field(default_factory=list)
    done: list[Action] = field(default_factory=list)
    registry: frozenset[str] = frozenset()
    """Counterparties the application knows (contacts, payees, members)."""
    application: tuple[str, ...] = ()
    """Values the application vouches for (the account and its records)."""

    def did(self, tool: str, **arguments: Any) -> None:
        """Record a side effect."""
        self.done.append(Action(tool, arguments))

    def known(self, value: str) -> bool:
        """The registry hook."""
        return value.strip().lower() in self.registry


@dataclass(frozen=True, slots=True)
class Case:
    """One scenario: a benign task, and an injection into what it reads."""

    name: str
    task: str
    plan: tuple[Step, ...]
    slot: str
    """Where the injection goes: a key of the world's ``slots``."""
    injection: str
    attack: tuple[Step, ...]
    """The calls the injection asks for, as an obedient model would write them."""
    values: tuple[str, ...] = ()
    """Values the injection introduced (an executed call carrying one is counted)."""
    style: Style = "direct"
    succeeded: Callable[[World], bool] = lambda world: True
    scoped: bool | None = None
    """Overrides the domain's ``scoped`` for this case."""
    approved: tuple[Step, ...] = ()
    """Calls of the user's own task that the human approves even when every other approval
    is denied (an approval the injection then tries to reuse)."""


@dataclass(frozen=True, slots=True)
class Domain:
    """A domain: how to build its world (given the slot texts) and its cases."""

    name: str
    build: Callable[[Mapping[str, str]], World]
    slots: Mapping[str, str]
    """The benign text of each injection slot."""
    cases: Sequence[Case]
    scoped: bool = True


def did(tool: str, **match: Any) -> Callable[[World], bool]:
    """A success check: ``tool`` performed a side effect with these argument values."""

    def check(world: World) -> bool:
        return any(
            a.tool == tool and all(a.arguments.get(k) == v for k, v in match.items())
            for a in world.done
        )

    return check
