"""Tools: schema from the signature, validation before the call, results as JSON, lint."""

from __future__ import annotations

import dataclasses
import threading
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from tether.errors import InvalidArguments, ToolDefinitionError
from tether.messages import ToolCall
from tether.tools import RunContext, count_sentences, lint, to_text, tool


@tool(name="lire_commande")
def read_order(numero: Annotated[str, "Numero de commande, de la forme C-1234."]) -> str:
    """Lit l'etat d'une commande : statut d'expedition et montant paye. A utiliser quand le
    client demande ou en est une commande. Ne modifie rien. Ne renvoie ni l'adresse ni le
    moyen de paiement."""
    return numero


def test_schema_matches_the_seed() -> None:
    spec = read_order.spec
    assert spec.name == "lire_commande"
    assert spec.description.startswith("Lit l'etat d'une commande")
    assert spec.parameters == {
        "type": "object",
        "properties": {
            "numero": {"type": "string", "description": "Numero de commande, de la forme C-1234."}
        },
        "required": ["numero"],
        "additionalProperties": False,
    }


def test_docstring_params_defaults_and_field_constraints() -> None:
    @tool
    def search(
        pattern: Annotated[str, Field(pattern=r"^\w+$")],
        since: int = 0,
        mode: Literal["fast", "full"] = "fast",
    ) -> str:
        """Search the logs. Returns matching lines. Changes nothing.

        Args:
            pattern: Word to search for.
            since: Rank of the first match.
            mode: How hard to look.
        """
        return pattern

    props = search.spec.parameters["properties"]
    assert props["pattern"] == {
        "type": "string",
        "pattern": r"^\w+$",
        "description": "Word to search for.",
    }
    assert props["since"]["default"] == 0
    assert props["since"]["description"] == "Rank of the first match."
    assert props["mode"]["enum"] == ["fast", "full"]
    assert search.spec.parameters["required"] == ["pattern"]
    assert search.spec.description == "Search the logs. Returns matching lines. Changes nothing."


def test_strict_schema_closes_objects_and_requires_all() -> None:
    @tool(strict=True)
    def f(a: Annotated[str, "A."], b: Annotated[int, "B."] = 1) -> str:
        """F."""
        return a

    assert f.spec.strict
    assert f.spec.parameters["required"] == ["a", "b"]
    assert f.spec.parameters["additionalProperties"] is False


async def test_invalid_arguments_name_every_bad_field() -> None:
    @tool
    def refund(
        numero: Annotated[str, Field(pattern=r"^C-\d{4}$", description="Order.")],
        montant: Annotated[float, Field(gt=0, description="Amount.")],
    ) -> str:
        """Refund."""
        return "done"

    ctx: RunContext[None] = RunContext(None)
    with pytest.raises(InvalidArguments) as info:
        await refund.invoke({"numero": "1042", "montant": -3, "extra": 1}, ctx)
    text = str(info.value)
    assert "numero" in text and "montant" in text and "extra" in text
    assert len(info.value.problems) == 3
    with pytest.raises(InvalidArguments, match="montant: Field required"):
        await refund.invoke({"numero": "C-1042"}, ctx)


async def test_results_serialise_to_json() -> None:
    class Order(BaseModel):
        numero: str
        montant: float

    @dataclasses.dataclass
    class Row:
        a: int

    assert to_text("plain") == "plain"
    assert to_text(Order(numero="C-1", montant=89.9)) == '{"numero":"C-1","montant":89.9}'
    assert to_text(Row(1)) == '{"a":1}'
    assert to_text({"k": [1, None]}) == '{"k":[1,null]}'
    assert to_text(None) == "null"


async def test_context_is_injected_not_in_schema() -> None:
    seen: list[Any] = []

    @tool
    async def who(ctx: RunContext[dict[str, str]], x: Annotated[int, "X."]) -> str:
        """Who."""
        seen.append((ctx.deps["user"], ctx.call.id if ctx.call else None, x))
        return "ok"

    assert list(who.spec.parameters["properties"]) == ["x"]
    ctx = RunContext({"user": "alice"}, "run1", ToolCall("call_7", "who", {"x": 3}))
    assert await who.invoke({"x": 3}, ctx) == "ok"
    assert seen == [("alice", "call_7", 3)]


async def test_sync_tools_run_in_a_worker_thread_unless_told_not_to() -> None:
    threads: list[str] = []

    @tool
    def threaded() -> str:
        """T."""
        threads.append(threading.current_thread().name)
        return "x"

    @tool(thread=False)
    def inline() -> str:
        """I."""
        threads.append(threading.current_thread().name)
        return "y"

    ctx: RunContext[None] = RunContext(None)
    await threaded.invoke({}, ctx)
    await inline.invoke({}, ctx)
    assert threads[0] != threading.main_thread().name
    assert threads[1] == threading.main_thread().name


def test_bad_definitions_are_refused() -> None:
    def no_doc(a: int) -> int:
        return a

    with pytest.raises(ToolDefinitionError, match="no description"):
        tool(no_doc)
    with pytest.raises(ToolDefinitionError, match="name"):
        tool(name="has space")(read_order.func)

    def varargs(*a: int) -> int:
        """V."""
        return 0

    with pytest.raises(ToolDefinitionError, match=r"\*args"):
        tool(varargs)


def test_sentence_count() -> None:
    assert count_sentences("One. Two! Three?") == 3
    assert count_sentences("One. Two") == 2
    assert count_sentences("") == 0
    assert count_sentences("Version 1.5 is out. Really.") == 2


def test_lint_flags_thin_descriptions_and_undocumented_parameters() -> None:
    @tool
    def thin(a: str, b: Annotated[str, Field(pattern="^x$", description="B.")]) -> str:
        """Does a thing."""
        return a

    findings = lint([thin, read_order])
    messages = [(f.tool, f.severity, f.message) for f in findings]
    assert any(t == "thin" and s == "error" and "1 sentence" in m for t, s, m in messages)
    assert any(t == "thin" and s == "error" and "'a' is undocumented" in m for t, s, m in messages)
    assert not any(t == "thin" and "'b'" in m for t, _, m in messages)
    # the seed's tool: four sentences, documented; only a hint to constrain the string
    seed = [f for f in findings if f.tool == "lire_commande"]
    assert [f.severity for f in seed] == ["hint"]
    assert "pattern or enum" in seed[0].message
