"""What :class:`~tether.guards.callpolicy.ProvenancePolicy` requires of each argument of
a tool, from its settings: one declaration that the policy's rulings and the blast-radius
report (:mod:`tether.blast.policy`) both read, so they cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from tether.tools import Tool

__all__ = ["OUTWARD", "ArgumentRule", "RuleSettings", "argument_rule"]

OUTWARD: frozenset[str] = frozenset({"write", "communicate", "money", "destructive"})
"""Effects with a side effect outside the run."""


class RuleSettings(Protocol):
    """The settings of a policy that its argument rules depend on."""

    @property
    def known_counterparty(self) -> Callable[..., Any] | None: ...
    @property
    def application(self) -> Callable[..., Any] | None: ...
    @property
    def members(self) -> Callable[[str], bool] | None: ...
    @property
    def strict(self) -> bool: ...
    @property
    def scoped(self) -> bool: ...
    @property
    def object_effects(self) -> Collection[str]: ...
    @property
    def object_tools(self) -> Collection[str]: ...


@dataclass(frozen=True, slots=True)
class ArgumentRule:
    """What :class:`~tether.guards.callpolicy.ProvenancePolicy` requires of one argument of
    one tool, from its settings: the rule it enforces and the blast-radius report states."""

    role: str
    """The argument's declared role (``counterparty``, ``object``, ``credential``,
    ``content``; ``""`` for an argument without one)."""
    passes: tuple[str, ...]
    """Where a value may come from to pass unasked: ``user``, ``application`` (when the
    policy has an ``application`` hook or ``members``), ``registry``
    (``known_counterparty``), ``system`` (a system-of-record field; for a traced object,
    asked once third-party text was read in the run)."""
    other: Literal["allow", "ask", "deny"]
    """Any other value: allowed, asked (denied past ``max_prompts``) or denied for good."""
    rule: str
    """The rule a ruling on such a value names (``provenance.scope``, ...); ``""`` when it
    is allowed."""
    traced: bool = False
    """An object traced to the user's request (:mod:`tether.guards.objects`)."""


def argument_rule(policy: RuleSettings, tool: Tool, argument: str) -> ArgumentRule | None:
    """The rule ``policy`` applies to ``argument`` of ``tool`` by its role (``None``:
    none beyond the secret and credential-leak checks every call gets). For content
    (and an argument without a role), the rule is about the links, addresses and
    account numbers it carries."""
    role = tool.roles.get(argument)
    side = tool.effect in OUTWARD
    vouches = policy.application is not None or policy.members is not None
    named = ("user", "application") if vouches else ("user",)
    if role == "counterparty":
        passes = (*named, "registry") if policy.known_counterparty is not None else named
        if policy.scoped:
            return ArgumentRule(role, passes, "deny", "provenance.scope")
        if side:
            other: Literal["ask", "deny"] = "deny" if policy.strict else "ask"
            return ArgumentRule(role, passes, other, "provenance.counterparty")
        return ArgumentRule(role, passes, "allow", "")
    traced = tool.effect in policy.object_effects or tool.name in policy.object_tools
    if role == "object" and side and policy.scoped:
        return ArgumentRule(role, named, "deny", "provenance.scope", traced)
    if role == "object" and traced:
        return ArgumentRule(role, (*named, "system"), "ask", "provenance.object", True)
    if role == "object" and side:
        return ArgumentRule(role, named, "allow", "")
    if role == "credential" and side:
        return ArgumentRule(role, named, "ask", "provenance.credential_argument")
    if role in ("content", None) and side:  # links, addresses, account numbers in it
        vouched = ("user", "application", "system")
        passes = (*vouched, "registry") if policy.known_counterparty is not None else vouched
        return ArgumentRule(role or "", passes, "ask", "provenance.content")
    return None
