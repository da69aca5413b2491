"""Structured output on the client seam, with scripted models."""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tether.clients import ChatOptions, OutputSchema
from tether.errors import ContextWindowExceeded, ProviderError, StructuredOutputError
from tether.messages import Message, Usage
from tether.providers.faults import FaultyClient
from tether.providers.scripted import ScriptedClient, json_reply, text_reply
from tether.structured import OutputType, extract, output_schema


class Motif(enum.Enum):
    SUIVI = "Suivi"
    REMBOURSEMENT = "Remboursement"
    AUTRE = "Autre"


class Tri(BaseModel):
    """Le tri d'un ticket."""

    motif: Motif


class Proposal(BaseModel):
    order: str
    amount: float
    note: str = "none"


PROPOSAL_REPLY = '{"order": "C-1", "amount": 3.5, "note": null}'


@dataclasses.dataclass
class Point:
    x: int
    y: int


async def test_a_model_comes_back_validated_with_usage() -> None:
    client = ScriptedClient([json_reply({"motif": "Remboursement"})])
    result = await extract(client, "Je veux etre rembourse.", Tri, instructions="Classe.")
    assert result.output == Tri(motif=Motif.REMBOURSEMENT)
    assert result.attempts == 1 and result.usage.requests == 1 and result.usage.output_tokens > 0
    request = client.requests[0]
    assert request.tools == () and request.options.instructions == "Classe."
    assert request.options.output_schema == output_schema(Tri)
    assert request.options.output_schema.name == "Tri"
    assert request.options.output_schema.description == "Le tri d'un ticket."
    assert [m.role for m in result.transcript] == ["user", "assistant"]


async def test_options_are_kept_and_the_history_is_sent_as_is() -> None:
    client = ScriptedClient([json_reply(Point(1, 2))])
    history = [Message.user("one"), Message.assistant("two"), Message.user("three")]
    options = ChatOptions("be terse", max_output_tokens=50, temperature=0.0, model="m")
    result = await extract(client, history, Point, options=options)
    assert result.output == Point(1, 2)
    sent = client.requests[0]
    assert list(sent.messages) == history
    assert (sent.options.instructions, sent.options.max_output_tokens) == ("be terse", 50)
    assert sent.options.model == "m"


@pytest.mark.parametrize(
    ("tp", "reply", "expected"),
    [
        (Literal["Suivi", "Autre"], '{"value": "Autre"}', "Autre"),
        (Literal["Suivi", "Autre"], '"Suivi"', "Suivi"),
        (Motif, '{"value": "Suivi"}', Motif.SUIVI),
        (list[int], '{"value": [1, 2, 3]}', [1, 2, 3]),
        (Point, '```json\n{"x": 1, "y": 2}\n```', Point(1, 2)),
        (Proposal, PROPOSAL_REPLY, Proposal(order="C-1", amount=3.5)),
    ],
)
async def test_each_kind_of_type_is_validated(tp: object, reply: str, expected: object) -> None:
    result = await extract(ScriptedClient([reply]), "go", tp)
    assert result.output == expected


def test_non_object_types_are_wrapped_and_named() -> None:
    schema = output_schema(Literal["a", "b"])
    assert schema.name == "output"
    assert schema.schema == {
        "type": "object",
        "properties": {"value": {"enum": ["a", "b"], "type": "string"}},
        "required": ["value"],
        "additionalProperties": False,
    }
    enum_schema = output_schema(Motif)
    assert enum_schema.name == "Motif"
    assert enum_schema.schema["properties"]["value"]["enum"] == ["Suivi", "Remboursement", "Autre"]
    assert output_schema(Tri, name="tri du ticket").name == "tri_du_ticket"


async def test_invalid_json_gets_one_reask_showing_the_problem() -> None:
    client = ScriptedClient(['{"motif": "Suivi"', json_reply({"motif": "Suivi"})])
    result = await extract(client, "Ou est mon colis ?", Tri)
    assert result.output.motif is Motif.SUIVI and result.attempts == 2
    second = client.requests[1].messages
    assert [m.role for m in second] == ["user", "assistant", "user"]
    assert second[1].text == '{"motif": "Suivi"'
    assert "not valid JSON" in second[2].text and "only the corrected JSON" in second[2].text
    assert result.usage.requests == 2


async def test_invalid_json_twice_is_a_typed_failure() -> None:
    client = ScriptedClient(["not json", "still not json", json_reply({"motif": "Suivi"})])
    with pytest.raises(StructuredOutputError) as caught:
        await extract(client, "x", Tri)
    err = caught.value
    assert err.kind == "invalid" and err.attempts == 2 and client.remaining == 1
    assert err.text == "still not json" and "not valid JSON" in err.problems[0]
    assert err.usage is not None and err.usage.requests == 2
    assert err.transcript[-1] == Message.assistant("still not json")


async def test_a_schema_violation_names_the_field_then_fails() -> None:
    client = ScriptedClient([json_reply({"motif": "Urgent"}), json_reply({"mood": "x"})])
    with pytest.raises(StructuredOutputError) as caught:
        await extract(client, "x", Tri)
    assert caught.value.kind == "invalid"
    reask = client.requests[1].messages[-1].text
    assert "motif: Input should be 'Suivi', 'Remboursement' or 'Autre'" in reask
    assert caught.value.problems == ("motif: Field required",)


async def test_strict_validation_does_not_coerce() -> None:
    client = ScriptedClient(['{"x": "1", "y": 2}', '{"x": 1.5, "y": 2}'])
    with pytest.raises(StructuredOutputError) as caught:
        await extract(client, "x", Point)
    assert caught.value.problems == ("x: Input should be a valid integer",)


async def test_no_reask_when_reasks_is_zero() -> None:
    client = ScriptedClient(["{}", json_reply({"motif": "Suivi"})])
    with pytest.raises(StructuredOutputError):
        await extract(client, "x", Tri, reasks=0)
    assert len(client.requests) == 1
    with pytest.raises(ValueError, match="reasks"):
        await extract(client, "x", Tri, reasks=-1)


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        ("refusal", "refused"),
        ("content_filter", "refused"),
        ("truncated_text", "truncated"),
        ("context_stop", "context_exceeded"),
        ("context_exceeded", "context_exceeded"),
    ],
)
async def test_refusal_truncation_and_overflow_are_typed_without_reask(
    fault: str, kind: str
) -> None:
    inner = ScriptedClient([json_reply({"motif": "Suivi"})] * 2)
    client = FaultyClient(inner, {1: fault})  # type: ignore[dict-item]
    with pytest.raises(StructuredOutputError) as caught:
        await extract(client, "x", Tri)
    assert caught.value.kind == kind and caught.value.attempts == 1
    assert len(inner.requests) <= 1


async def test_a_truncated_but_parseable_reply_is_still_a_failure() -> None:
    client = ScriptedClient([json_reply({"motif": "Suivi"}, stop="max_tokens")])
    with pytest.raises(StructuredOutputError) as caught:
        await extract(client, "x", Tri)
    assert caught.value.kind == "truncated" and "max_output_tokens" in str(caught.value)


async def test_provider_failures_are_not_hidden() -> None:
    client = FaultyClient(ScriptedClient([]), {1: "rate_limit"})
    with pytest.raises(ProviderError) as caught:
        await extract(client, "x", Tri)
    assert caught.value.kind == "rate_limit"
    assert not isinstance(caught.value, ContextWindowExceeded)


async def test_a_prebuilt_output_type_is_reused() -> None:
    out = OutputType.of(Tri)
    assert OutputType.of(Tri) is out
    result = await extract(ScriptedClient([json_reply({"motif": "Autre"})]), "x", out)
    assert result.output.motif is Motif.AUTRE


def test_output_schema_is_plain_data() -> None:
    schema = OutputSchema("n", {"type": "object", "properties": {}})
    assert ChatOptions(output_schema=schema).output_schema is schema
    assert ChatOptions().output_schema is None


# Replies a model might send: valid objects, wrong values, wrong shapes, broken JSON.
_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)
_objects = st.fixed_dictionaries(
    {"order": st.text(max_size=6), "amount": st.floats(allow_nan=False) | st.integers()},
    optional={"note": st.none() | st.text(max_size=6) | st.integers()},
)
_replies = (
    _objects.map(json.dumps)
    | _values.map(json.dumps)
    | st.text(max_size=30)
    | _objects.map(lambda o: json.dumps(o)[:-1])
)


@settings(max_examples=150, deadline=None)
@given(first=_replies, second=_replies)
async def test_random_replies_never_yield_an_unvalidated_object(first: str, second: str) -> None:
    client = ScriptedClient([text_reply(first, usage=Usage(1, 1, requests=1)), second])
    failure: StructuredOutputError | None = None
    try:
        result = await extract(client, "x", Proposal)
    except StructuredOutputError as err:
        failure = err
    if failure is not None:
        assert failure.kind == "invalid" and failure.problems and failure.attempts == 2
        return
    assert isinstance(result.output, Proposal)
    Proposal.model_validate(result.output.model_dump(), strict=True)
    assert isinstance(result.output.amount, float) and isinstance(result.output.note, str)
