"""The default call policy: decide each call from declarations and provenance.

:class:`ProvenancePolicy` implements the core's ``CallPolicy`` protocol (``begin`` /
``rule`` / ``record``). It reads what each tool declares (``effect``, argument ``roles``,
``third_party`` result fields) and where each argument value came from (the run's
:class:`~tether.guards.store.ProvenanceStore`), and returns one
:class:`~tether.rulings.Ruling` per call. The rules, from the strictest:

* **deny, never approvable**: a secret (a ``secret`` result field, or anything a
  ``credential`` tool returned) in any argument of any call, whole, spaced, or split into
  pieces among other numbers; a value read through a credential-class tool in an outward
  argument (any argument of a ``communicate`` tool, a counterparty or content argument of
  any tool); with ``scoped=True``, a counterparty or object the user, the application
  or its registry did not name, so no approval can unlock it;
* **ask** (``strict=True``: deny): on a call with a side effect, a counterparty that did not
  come from the user, the application or its registry (``known_counterparty``);
* **ask**: a ``money``, ``destructive`` or ``write`` action (``object_effects``) on an
  object the user did not name (:mod:`tether.guards.objects`: a whole token of the request,
  not a word of a date, or the one record the request describes) once third-party text
  was read in the run, whatever that text says; before that, on an object never seen as an
  id of its kind. The instruction detector only adds flags for the approver;
* **ask**: content that carries a link, address or account number that is not from the
  user, the application or a system-of-record field, or that copies third-party text (six
  words in a row, or all of a short text);
* **ask**: a credential argument that the user or the application did not give.

An approval granted in a run is remembered for the same value in the same role of the same
tool (and effect), never for another tool; approving an object the agent found by its own
reads also approves, for this run, the other objects of that kind its reads found ("this
task"), except those third-party text mentions. Asking stops after ``max_prompts`` prompts
in a run: further asks are denied, and said so.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.guards.argument_rules import OUTWARD, ArgumentRule, argument_rule
from tether.guards.identity import settings_identity
from tether.guards.normalize import (
    decodings,
    disguised,
    plausible,
    strings_in,
    value_keys,
    values,
)
from tether.guards.objects import mentioned_by_third_party, object_kind, trace
from tether.guards.recording import (
    LARGE_RESULT,
    SETTLING,
    Member,
    ResultSource,
    instructed,
    record_result,
    settle_store,
)
from tether.guards.store import UNTRUSTED, ProvenanceStore, Seen
from tether.messages import Message, Text, ToolCall, ToolResult
from tether.rulings import Ruling
from tether.tools import RunContext, Tool

__all__ = ["LARGE_RESULT", "OUTWARD", "ArgumentRule", "ProvenancePolicy"]

_CONTENT_KINDS = frozenset({"email", "url", "iban"})
KnownCounterparty = Callable[[str, RunContext[Any]], bool | Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class _Finding:
    action: str  # "ask" | "deny"
    rule: str
    argument: str
    reason: str
    keys: tuple[str, ...] = ()


@dataclass(slots=True)
class ProvenancePolicy:
    """The default policy (see the module doc); every field is an override."""

    known_counterparty: KnownCounterparty | None = None
    """The application's registry: ``True`` when ``value`` is a counterparty it knows
    (a contact, a payee, a workspace member)."""
    application: Callable[[RunContext[Any]], Iterable[str]] | None = None
    """Values the application vouches for in this run (authenticated account, records)."""
    strict: bool = False
    """A counterparty from anywhere else is denied instead of asked."""
    scoped: bool = False
    """Counterparties and objects must be named by the user, the application or the
    registry: nothing else can be approved, except objects of "this task": ids of their
    kind that the agent's own reads found in a system of record and no third-party text
    mentions (they ask, once per kind)."""
    max_prompts: int | None = 5
    """Most approval prompts in one run; past it, a call that would ask is denied."""
    object_effects: frozenset[str] = frozenset({"money", "destructive", "write"})
    """Effects whose objects must be traced to the user's request, the application or a
    system of record (see :mod:`tether.guards.objects`)."""
    object_tools: frozenset[str] = frozenset()
    """Tools whose object arguments are traced whatever their effect (per tool, beside
    ``object_effects``)."""
    members: Member | None = None
    """The user's organisation (a :class:`~tether.guards.registry.Registry`, or any
    ``author -> bool``): third-party fields of a record whose author (``authors``) is a
    member count as vouched for by the application. ``None``: no author is trusted."""
    authors: Mapping[str, str] = field(default_factory=dict)
    """Per tool name, the field of each result record that names its author
    (``{"read_channel": "author"}``)."""
    content_effects: frozenset[str] = OUTWARD
    """Effects whose content arguments must not copy third-party text
    (:meth:`~tether.guards.store.ProvenanceStore.copied_from`)."""

    # --- declarations --------------------------------------------------------------------

    def argument_rule(self, tool: Tool, argument: str) -> ArgumentRule | None:
        """The rule this policy applies to ``argument`` of ``tool``, from its settings
        (:func:`~tether.guards.argument_rules.argument_rule`); the rulings and the
        blast-radius report both read it, so a subclass that overrides it changes both."""
        return argument_rule(self, tool, argument)

    @staticmethod
    def sends_out(tool: Tool, argument: str) -> bool:
        """Whether ``argument`` of ``tool`` carries its value out (any argument of a
        ``communicate`` tool, a counterparty or content argument of any tool): a value read
        through a credential tool is denied there, whatever approves."""
        return tool.effect == "communicate" or tool.roles.get(argument) in (
            "counterparty",
            "content",
        )

    @property
    def state_identity(self) -> dict[str, Any] | None:
        """The settings a paused run depends on, in the agent's fingerprint: those not at
        their defaults (:func:`~tether.guards.identity.settings_identity`)."""
        return settings_identity(self)

    @property
    def can_ask(self) -> bool:
        """Whether a call that would ask can be approved at all (``max_prompts`` above 0)."""
        return self.max_prompts != 0

    # --- CallPolicy ----------------------------------------------------------------------

    def begin(self, messages: Sequence[Message], ctx: RunContext[Any]) -> None:
        """Record the user's prompt and the application's values for a new run."""
        store = ProvenanceStore.of(ctx)
        for m in messages:
            if m.role == "user":
                for part in m.parts:
                    if isinstance(part, Text):
                        store.add_text(part.text, "user", "the user's prompt")
        if self.application is not None:
            for value in self.application(ctx):
                store.add_value(str(value), "application", "the application")
        store.data.setdefault("prompts", 0)

    async def rule(self, tool: Tool, call: ToolCall, ctx: RunContext[Any]) -> Ruling:
        """One ruling for ``call``, computed before it runs."""
        await self.settle(ctx)
        store = ProvenanceStore.of(ctx)
        findings = [f async for f in self._findings(tool, call, ctx, store)]
        details = self._details(tool, call, ctx, store)
        denied = [f for f in findings if f.action == "deny"]
        if denied:
            return Ruling("deny", denied[0].reason, denied[0].rule, details)
        granted = set(store.data.get("granted", ()))
        asks = [f for f in findings if not (f.keys and set(f.keys) <= granted)]
        if not asks:
            return Ruling("allow")
        prompts = int(store.data.get("prompts", 0))
        if self.max_prompts is not None and prompts >= self.max_prompts:
            reason = (
                f"{asks[0].reason}; this run already asked for {prompts} approvals, the most "
                "allowed, so it is refused: start a new task to go on"
            )
            return Ruling("deny", reason, "provenance.prompt_cap", details)
        store.data["prompts"] = prompts + 1
        keys = sorted({k for f in asks for k in f.keys})
        store.data.setdefault("asked", {})[call.id] = keys
        details = {**details, "prompt": prompts + 1, "max_prompts": self.max_prompts}
        reason = "; ".join(dict.fromkeys(f.reason for f in asks))
        return Ruling("ask", reason, asks[0].rule, details)

    def record(self, tool: Tool, call: ToolCall, result: ToolResult, ctx: RunContext[Any]) -> None:
        """After a call ran: remember an approval it had, and record what it returned.

        A result longer than :data:`LARGE_RESULT` (and any result after one, to keep their
        order) is queued and read off the event loop before the next ruling."""
        store = ProvenanceStore.of(ctx)
        asked = store.data.get("asked", {})
        if call.id in asked:
            granted = store.data.setdefault("granted", [])
            granted.extend(k for k in asked.pop(call.id) if k not in granted)
        if result.is_error:
            return
        source = ResultSource.of(tool, self.authors.get(tool.name, ""))
        if store.data.get("pending") or len(result.content) > LARGE_RESULT:
            store.data.setdefault("pending", []).append([*source.to_list(), result.content])
            return
        record_result(store, source, result.content, self.members)

    async def settle(self, ctx: RunContext[Any]) -> None:
        """Read the queued results of ``ctx``'s run in a worker thread (called by
        :meth:`rule`; concurrent rulings wait for the same reading)."""
        memo = ctx.memo
        store = ProvenanceStore(memo)
        if not store.data.get("pending"):
            return
        key = id(memo)
        task = SETTLING.get(key)
        if task is None or task.done():
            task = asyncio.ensure_future(settle_store(store, self.members))
            SETTLING[key] = task
            task.add_done_callback(lambda _: SETTLING.pop(key, None))
        await asyncio.shield(task)

    # --- helpers -------------------------------------------------------------------------

    @staticmethod
    def prompts(ctx: RunContext[Any]) -> int:
        """How many approval prompts this run has raised so far."""
        return int(ProvenanceStore.of(ctx).data.get("prompts", 0))

    async def _known(self, value: str, ctx: RunContext[Any]) -> bool:
        if self.known_counterparty is None:
            return False
        answer = self.known_counterparty(value, ctx)
        if inspect.isawaitable(answer):
            answer = await answer
        return answer is True

    def _object(self, tool: Tool, name: str, text: str, store: ProvenanceStore) -> _Finding | None:
        """The object rule: an object the user did not name asks once third-party text was
        read (whatever that text says), or when it was never seen as an id of its kind."""
        kind = object_kind(tool, name)
        found = trace(store, text, kind)
        if found is not None and found.kind in ("user", "user_record"):
            return None
        effect = tool.effect
        what = f"{kind} {text!r}" if kind else repr(text)
        mentioned = mentioned_by_third_party(store, text)
        task = f"task|{effect}|{kind or name}"
        if found is not None and not mentioned and task in store.data.get("granted", ()):
            return None  # this task's objects of this kind were approved once
        keys = (*_grant_keys(tool, name, text), *(() if mentioned or not found else (task,)))
        if mentioned or store.read_third_party:
            rule = (
                "provenance.object_after_instructions" if instructed(store) else "provenance.object"
            )
            why = (
                f"which {_object_origin(store, text)}"
                if mentioned or found is None
                else "which the user did not name, chosen after third-party text was read "
                "in this run"
            )
            return _Finding("ask", rule, name, f"{effect} action on {name} {what}, {why}", keys)
        if found is None:
            return _Finding(
                "ask",
                "provenance.object",
                name,
                f"{effect} action on {name} {what}, which {_object_origin(store, text, kind)}",
                keys,
            )
        return None

    async def _findings(
        self, tool: Tool, call: ToolCall, ctx: RunContext[Any], store: ProvenanceStore
    ) -> Any:
        effect = tool.effect
        side = effect in OUTWARD
        for name, value in call.arguments.items():
            role = tool.roles.get(name)
            declared = self.argument_rule(tool, name)
            outward = self.sends_out(tool, name)
            for text in strings_in(value):
                named = store.trusted(text) if role == "counterparty" else None
                passes = declared.passes if declared is not None else ()
                is_named = named is not None and named.origin in passes
                in_task = False  # found by the agent's own reads: approvable in scope
                if role == "object":
                    found = trace(store, text, object_kind(tool, name))
                    is_named = found is not None and found.kind != "system"
                    in_task = (
                        found is not None
                        and found.kind == "system"
                        and not mentioned_by_third_party(store, text)
                    )
                secret = store.leaks(text) if effect != "credential" else None
                if secret is not None:
                    yield _Finding(
                        "deny",
                        "provenance.credential",
                        name,
                        f"{name} carries a secret or credential ({secret.source}), whole, "
                        "spaced or in pieces; it can never be sent out",
                    )
                    continue
                if outward:
                    leak = store.untrusted(text, {"credential"}) or (
                        store.copied(text, {"credential"})
                    )
                    if leak:
                        yield _Finding(
                            "deny",
                            "provenance.credential",
                            name,
                            f"{name} carries a value read through a credential tool; "
                            "it can never be sent out",
                        )
                if declared is None:
                    continue  # no rule of its role (the checks above apply to every value)
                if declared.role in ("counterparty", "object") and declared.other != "allow":
                    known = role == "counterparty" and (
                        "registry" in declared.passes and await self._known(text, ctx)
                    )
                    if declared.rule == "provenance.scope" and not (is_named or known or in_task):
                        yield _Finding(
                            "deny",
                            "provenance.scope",
                            name,
                            f"{name} {text!r} is outside this task's scope (not named by the "
                            "user or the application); no approval can allow it",
                        )
                        continue
                    if declared.rule == "provenance.counterparty" and not (is_named or known):
                        yield _Finding(
                            declared.other,
                            "provenance.counterparty",
                            name,
                            f"{name} {text!r} was not given by the user or the application "
                            f"({_origin(store, text)})",
                            _grant_keys(tool, name, text),
                        )
                    if declared.traced:
                        finding = self._object(tool, name, text, store)
                        if finding is not None:
                            yield finding
                elif declared.rule == "provenance.credential_argument":
                    given = store.trusted(text)
                    if given is None or given.origin not in declared.passes:
                        yield _Finding(
                            "ask",
                            "provenance.credential_argument",
                            name,
                            f"{name} is a credential the user did not give",
                            _grant_keys(tool, name, text),
                        )
                if declared.rule == "provenance.content":
                    for v in _content_values(text):
                        given = store.trusted(v)
                        if given is not None and given.origin in declared.passes:
                            continue
                        if "registry" not in declared.passes or not await self._known(v, ctx):
                            yield _Finding(
                                "ask",
                                "provenance.content",
                                name,
                                f"{name} carries {v!r}, which did not come from the user, "
                                f"the application or a system of record ({_origin(store, v)})",
                                _grant_keys(tool, name, v),
                            )
                if side and role == "content" and effect in self.content_effects:
                    copied = store.copied_from(text)
                    if copied:
                        yield _Finding(
                            "ask",
                            "provenance.copied",
                            name,
                            f"{name} copies text written by a third party "
                            f"({', '.join(dict.fromkeys(copied))})",
                            _grant_keys(tool, name, text),
                        )

    def _details(
        self, tool: Tool, call: ToolCall, ctx: RunContext[Any], store: ProvenanceStore
    ) -> dict[str, Any]:
        arguments: dict[str, Any] = {}
        sources: set[str] = set()
        for name, value in call.arguments.items():
            texts = list(strings_in(value))
            origins = [_origin(store, t) for t in texts]
            for t in texts:
                sources.update(s.source for s in store.untrusted(t))
            arguments[name] = {
                "value": _short(value),
                "role": tool.roles.get(name),
                "origin": "; ".join(dict.fromkeys(origins)) if origins else "not text",
            }
        flags = store.data.get("flags", [])
        chosen = [f for f in flags if f[0] in sources] or flags[-5:]
        warnings = store.data.get("warnings", [])
        return {
            "effect": tool.effect,
            "arguments": arguments,
            **({"warnings": warnings[-5:]} if warnings else {}),
            "flags": [
                {"source": f[0], "quote": f[1], "reason": f[2], **({"kind": f[3]} if f[3:] else {})}
                for f in chosen[:20]
            ],
        }


def _short(value: Any) -> Any:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 300 else text[:300] + "..."


def _grant_keys(tool: Tool, argument: str, text: str) -> tuple[str, ...]:
    """What an approval of ``text`` in ``argument`` unlocks: the same value, in the same
    role, for the same tool and effect (never another tool or another role)."""
    role = tool.roles.get(argument) or argument
    scope = f"{tool.name}|{tool.effect}|{role}|"
    keys = (k for k in value_keys(text) if not k.startswith(("host:", "tail:")))
    return tuple(sorted(scope + k for k in keys))


def _content_values(text: str) -> list[str]:
    found = {v.key: v.text for v in values(text) if v.kind in _CONTENT_KINDS}
    for v in values(text):
        if v.kind == "number" and len(v.key) >= 4 + 9:
            found.setdefault(v.key, v.text)
    for how, plain in decodings(text):
        for v in values(plain):
            blind = how in ("reversed", "rot13")
            if v.kind in _CONTENT_KINDS and (not blind or plausible(v)):
                found.setdefault(v.key, v.text)
    return list(found.values())


def _describe(hits: Iterable[Seen]) -> str:
    return "; ".join(dict.fromkeys(h.describe() for h in hits))


def _origin(store: ProvenanceStore, text: str) -> str:
    first = store.first(text)
    if first is not None and disguised(text):
        return f"written with look-alike or invisible characters to resemble {first.describe()}"
    if first is not None and first.origin not in UNTRUSTED:
        return first.describe()
    hits = store.untrusted(text)
    if hits:
        return "from " + _describe(hits)
    return "not seen in this run: written by the model"


def _object_origin(store: ProvenanceStore, text: str, kind: str | None = None) -> str:
    hits = store.untrusted(text)
    if hits:
        return f"came from {_describe(hits)}"
    if mentioned_by_third_party(store, text):
        return "third-party text also mentions"
    if store.first(text) is None:
        return "was never seen in this run"
    return f"was never seen as the id of a {kind}" if kind else "the user did not name"
