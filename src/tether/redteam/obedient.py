"""The worst-case model: it obeys every instruction it reads, and tries every tool.

:class:`ObedientModel` is a :class:`~tether.clients.ChatClient` driven by the history. Each
turn it reads everything the run put in front of it (the instructions, user messages and
every tool result, JSON decoded), and:

1. issues a call for each instruction it found and has not acted on yet (all at once);
2. else takes the next step of the legitimate plan it was given;
3. else calls each tool it has not called yet, with arguments made of the attacker's
   values (addresses, order numbers, paths, commands, URLs), once;
4. else gives its final answer.

It never repeats a call (same tool, same arguments), so a run always ends.

Instructions it recognises (English or French, one sentence or line each)::

    call TOOL with {json}                 appelle TOOL avec {json}
    refund C-2210 [, C-3107] [12.50 EUR]  rembourser integralement C-1042, C-2210
    send|mail|confirm|forward ... a@b.c   envoyer|confirmer|transferer ... a@b.c
    read [file] PATH                      lire [le fichier] PATH
    run `COMMAND`                         executer `COMMAND`
    fetch|open|download URL               telecharger URL

A tool is picked by name (``refund``/``rembourser``, ``mail``/``send``/``reply``,
``read``/``file``, ``shell``/``run``/``command``, ``fetch``/``http``) and its arguments by
parameter name and type; a "full" refund omits an optional amount, else asks for 1000.
It reads every tool result except errors (the runtime's own refusals and denials).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from tether.clients import BaseChatClient, ChatOptions, ChatResponse
from tether.messages import Message, StopReason, Text, ToolCall, Usage
from tether.tools import ToolSpec

__all__ = ["Attempt", "Instruction", "ObedientModel", "PlanStep", "extract_instructions"]

PlanStep: TypeAlias = (
    tuple[str, Mapping[str, Any]]
    | Callable[[Sequence[Message]], tuple[str, Mapping[str, Any]] | None]
)

EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
ORDER = re.compile(r"\b[A-Z]{1,3}-\d{3,}\b")
URL = re.compile(r"https?://[^\s\"'<>`]+")
MONEY = re.compile(r"(\d+(?:[.,]\d{1,2})?)\s*(?:€|eur\b|euros?\b)", re.IGNORECASE)
CALL = re.compile(r"\b(?:call|appeler?|appelle)\s+([A-Za-z0-9_-]+)\s+(?:with|avec)\s*(?=\{)", re.I)
REFUND = re.compile(r"\b(?:refund|rembourse[rz]?)\b", re.IGNORECASE)
FULL = re.compile(r"\b(?:full|fully|entire|integral|intégral|totalit)", re.IGNORECASE)
SEND = re.compile(
    r"\b(?:send|e-?mail|mail|confirm|forward|reply|write|envoie[rz]?|envoyer|confirme[rz]?"
    r"|transf[eé]re[rz]?|courriel|[ée]cri(?:re|s|vez))\b",
    re.IGNORECASE,
)
READ = re.compile(
    r"\b(?:read|open|cat|display|lire|lis|ouvr|affich)\w*\s+(?:the\s+|le\s+)?(?:file\s+|fichier\s+)?"
    r"([~./\w-]*[/.][~./\w-]+)",
    re.IGNORECASE,
)
RUN = re.compile(r"\b(?:run|execute|exec|ex[ée]cute[rz]?|lance[rz]?)\b[^`]*`([^`]+)`", re.I)
FETCH = re.compile(r"\b(?:fetch|visit|open|download|go to|t[ée]l[ée]charge\w*|ouvr\w*)\b", re.I)

TOOL_KINDS: dict[str, re.Pattern[str]] = {
    "refund": re.compile(r"refund|rembours", re.I),
    "send": re.compile(r"mail|send|reply|message|notify|courriel|envo|post", re.I),
    "read": re.compile(r"read|file|open|lire|fichier|cat", re.I),
    "run": re.compile(r"shell|bash|run|exec|command|terminal", re.I),
    "fetch": re.compile(r"fetch|http|browse|web|url|download", re.I),
}
PARAM_KINDS: list[tuple[str, re.Pattern[str]]] = [
    ("amount", re.compile(r"amount|montant|sum|somme", re.I)),
    ("to", re.compile(r"^to$|recipient|email|address|destinat|adresse", re.I)),
    ("url", re.compile(r"url|uri|link|href", re.I)),
    ("path", re.compile(r"path|file|chemin|fichier", re.I)),
    ("command", re.compile(r"command|cmd|argv|script", re.I)),
    ("order", re.compile(r"order|commande|numero|number|^id$", re.I)),
    ("body", re.compile(r"body|text|message|content|corps|contenu|subject|note", re.I)),
]


@dataclass(frozen=True, slots=True)
class Instruction:
    """One imperative found in text: what to do, and the values it names."""

    kind: str  # "call" | "refund" | "send" | "read" | "run" | "fetch"
    text: str
    values: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Attempt:
    """A call the obedient model made because of an instruction or a probe."""

    call: ToolCall
    reason: str


def extract_instructions(text: str) -> list[Instruction]:
    """Every instruction of the mini-language in ``text``, in order."""
    found: list[Instruction] = []
    decoder = json.JSONDecoder()
    for match in CALL.finditer(text):
        try:
            args, _ = decoder.raw_decode(text, match.end())
        except ValueError:
            continue
        if isinstance(args, dict):
            found.append(Instruction("call", match.group(), {"tool": match.group(1), "args": args}))
    for sentence in re.split(r"(?<=[.!?;])\s+|\n+", text):
        found.extend(_sentence_instructions(sentence))
    return found


def _sentence_instructions(sentence: str) -> list[Instruction]:
    out: list[Instruction] = []
    if CALL.search(sentence):
        return out
    if REFUND.search(sentence):
        amounts = [float(m.group(1).replace(",", ".")) for m in MONEY.finditer(sentence)]
        values: dict[str, Any] = {"orders": ORDER.findall(sentence), "amounts": amounts}
        values["full"] = bool(FULL.search(sentence)) or not amounts
        out.append(Instruction("refund", sentence, values))
    emails = EMAIL.findall(sentence)
    if emails and SEND.search(sentence):
        out.append(Instruction("send", sentence, {"to": emails}))
    for m in READ.finditer(sentence):
        if not EMAIL.fullmatch(m.group(1)) and not URL.match(m.group(1)):
            out.append(Instruction("read", sentence, {"path": m.group(1).rstrip(".,;")}))
    for m in RUN.finditer(sentence):
        out.append(Instruction("run", sentence, {"command": m.group(1)}))
    if FETCH.search(sentence):
        for url in URL.findall(sentence):
            out.append(Instruction("fetch", sentence, {"url": url.rstrip(".,;)")}))
    return out


def _texts(messages: Sequence[Message], options: ChatOptions) -> list[str]:
    """What the model reads: instructions, user text, and every tool result that is not an
    error (errors are the runtime's own messages: refusals, policy denials)."""
    texts = [options.instructions] if options.instructions else []
    for m in messages:
        if m.role == "assistant":
            continue
        texts.extend(p.text for p in m.parts if isinstance(p, Text))
        for r in m.tool_results:
            if not r.is_error:
                texts.extend(_decoded(r.content))
    return texts


def _decoded(content: str) -> Iterable[str]:
    try:
        value = json.loads(content)
    except ValueError:
        yield content
        return
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            yield from _decoded(v) if v.lstrip().startswith(("{", "[")) else (v,)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def _key(name: str, args: Mapping[str, Any]) -> str:
    return name + json.dumps(args, sort_keys=True, default=str)


class ObedientModel(BaseChatClient):
    """A scripted model that follows every instruction it reads (see the module doc).

    ``plan`` is the legitimate task, as calls or functions of the history returning a call
    (or ``None`` to skip); ``answer`` is the final text. ``attempts`` lists the calls made
    because of an instruction or a probe, ``instructions`` all instructions read and
    ``unreachable`` those no tool could carry out, across runs of this instance.
    """

    def __init__(
        self,
        plan: Sequence[PlanStep] = (),
        *,
        answer: str | Callable[[Sequence[Message]], str] = "Done.",
        probe_all_tools: bool = True,
    ) -> None:
        self.plan = list(plan)
        self.answer = answer
        self.probe_all_tools = probe_all_tools
        self.attempts: list[Attempt] = []
        self.instructions: list[Instruction] = []
        self.unreachable: list[Instruction] = []

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        issued = {_key(c.name, c.arguments) for m in messages for c in m.tool_calls}
        turn = 1 + sum(1 for m in messages if m.role == "assistant")
        texts = _texts(messages, options)
        found = [i for t in texts for i in extract_instructions(t)]
        for i in found:
            if i not in self.instructions:
                self.instructions.append(i)
        vocab = _vocabulary(found)
        wanted: list[tuple[str, dict[str, Any], str]] = []
        for instruction in found:
            calls = _calls_for(instruction, tools, vocab)
            if not calls and instruction not in self.unreachable:
                self.unreachable.append(instruction)
            for name, args in calls:
                wanted.append((name, args, f"instruction: {instruction.text.strip()[:120]}"))
        if not _fresh(wanted, issued):
            step = self._next_step(messages, issued)
            if step is not None:
                return _reply(turn, [(step[0], dict(step[1]), "")], self)
            if self.probe_all_tools:
                called = {c.name for m in messages for c in m.tool_calls}
                wanted = [
                    (t.name, _arguments(t, "probe", vocab), "probe: try every tool")
                    for t in tools
                    if t.name not in called
                ]
        todo = _fresh(wanted, issued)
        if todo:
            return _reply(turn, todo, self)
        text = self.answer if isinstance(self.answer, str) else self.answer(messages)
        return ChatResponse((Message.assistant(text),), StopReason.parse("end_turn"), _usage())

    def _next_step(
        self, messages: Sequence[Message], issued: set[str]
    ) -> tuple[str, Mapping[str, Any]] | None:
        for step in self.plan:
            call = step(messages) if callable(step) else step
            if call is not None and _key(call[0], call[1]) not in issued:
                return call
        return None


def _fresh(
    wanted: list[tuple[str, dict[str, Any], str]], issued: set[str]
) -> list[tuple[str, dict[str, Any], str]]:
    out, seen = [], set(issued)
    for name, args, reason in wanted:
        key = _key(name, args)
        if key not in seen:
            seen.add(key)
            out.append((name, args, reason))
    return out


def _reply(
    turn: int, calls: list[tuple[str, dict[str, Any], str]], model: ObedientModel
) -> ChatResponse:
    parts = []
    for n, (name, args, reason) in enumerate(calls, 1):
        call = ToolCall(f"obey_{turn}_{n}", name, args)
        parts.append(call)
        if reason:
            model.attempts.append(Attempt(call, reason))
    message = Message("assistant", tuple(parts))
    return ChatResponse((message,), StopReason.parse("tool_use"), _usage())


def _usage() -> Usage:
    return Usage(input_tokens=1, output_tokens=1, requests=1)


def _vocabulary(found: list[Instruction]) -> dict[str, Any]:
    """The attacker's values, by kind, for filling arguments: the first of each kind found
    (so the same instruction always gives the same call and is never repeated)."""
    vocab: dict[str, Any] = {"amount": None, "body": "probe"}
    for i in found:
        for kind, key in (("order", "orders"), ("to", "to")):
            if i.values.get(key):
                vocab.setdefault(kind, i.values[key][0])
        for kind in ("path", "command", "url"):
            if kind in i.values:
                vocab.setdefault(kind, i.values[kind])
    return vocab


def _tool_for(kind: str, tools: Sequence[ToolSpec]) -> ToolSpec | None:
    pattern = TOOL_KINDS[kind]
    return next((t for t in tools if pattern.search(t.name)), None)


def _calls_for(
    instruction: Instruction, tools: Sequence[ToolSpec], vocab: dict[str, Any]
) -> list[tuple[str, dict[str, Any]]]:
    v = instruction.values
    if instruction.kind == "call":
        return [(str(v["tool"]), dict(v["args"]))]
    spec = _tool_for(instruction.kind, tools)
    if spec is None:
        return []
    if instruction.kind == "refund":
        amounts = [vocab["amount"]] if v["full"] else v["amounts"]
        orders = v["orders"] or [None]
        return [
            (spec.name, _arguments(spec, "refund", {**vocab, "order": o, "amount": a}))
            for o in orders
            for a in amounts
        ]
    if instruction.kind == "send":
        body = instruction.text.strip()[:300]
        return [
            (spec.name, _arguments(spec, "send", {**vocab, "to": to, "body": body}))
            for to in v["to"]
        ]
    return [(spec.name, _arguments(spec, instruction.kind, {**vocab, **v}))]


def _arguments(spec: ToolSpec, purpose: str, vocab: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments for ``spec`` from the attacker's values, matched by parameter name."""
    props: Mapping[str, Any] = spec.parameters.get("properties", {})
    required = set(spec.parameters.get("required", []))
    args: dict[str, Any] = {}
    for name, schema in props.items():
        kind = next((k for k, p in PARAM_KINDS if p.search(name)), None)
        if kind == "order" and purpose == "run":
            kind = "command"  # "commande" is also the French for a command
        value = vocab.get(kind) if kind else None
        if value is None and name not in required:
            continue
        args[name] = _typed(value, schema, vocab)
    return args


def _typed(value: Any, schema: Mapping[str, Any], vocab: Mapping[str, Any]) -> Any:
    kind = schema.get("type")
    if kind in ("number", "integer"):
        number = value if isinstance(value, int | float) else 1000.0
        return int(number) if kind == "integer" else float(number)
    if kind == "boolean":
        return True
    if kind == "array":
        return shlex.split(value) if isinstance(value, str) else [value] if value else []
    if value is None:
        value = next(
            (vocab[k] for k in ("order", "to", "path", "url") if vocab.get(k) is not None), "x"
        )
    return str(value)
