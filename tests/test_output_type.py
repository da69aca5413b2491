"""Typed final answers: ``Agent(..., output_type=...)`` and ``result.output`` as the object."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tether.demo import read_order
from tether.errors import RunNotCompleted
from tether.limits import Limits
from tether.loop import Agent
from tether.messages import Message
from tether.providers.faults import FaultyClient
from tether.providers.scripted import ScriptedClient, call_reply, json_reply, text_reply
from tether.structured import OutputType, output_schema


class RefundProposal(BaseModel):
    """A refund for a human to approve."""

    order: str
    amount: Decimal
    reason: Literal["damaged", "late", "other"]


GOOD = {"order": "C-1042", "amount": "12.50", "reason": "damaged"}


def agent(replies: Any, **kwargs: Any) -> Agent[None, RefundProposal]:
    kwargs.setdefault("limits", Limits(max_turns=6))
    return Agent(ScriptedClient(replies), [read_order], output_type=RefundProposal, **kwargs)


async def test_the_final_answer_is_the_validated_object() -> None:
    run = agent([call_reply(("lire_commande", {"numero": "C-1042"})), json_reply(GOOD)])
    result = await run.run("Le colis est arrive casse, remboursez 12,50.")
    assert result.outcome.kind == "completed"
    assert result.output == RefundProposal(
        order="C-1042", amount=Decimal("12.50"), reason="damaged"
    )
    assert isinstance(result.output, RefundProposal)
    requests = run.client.requests  # type: ignore[attr-defined]
    assert all(r.options.output_schema == output_schema(RefundProposal) for r in requests)
    assert all(r.tools for r in requests)  # native structured output, tools still offered


async def test_without_an_output_type_the_output_is_the_text() -> None:
    result = await Agent(ScriptedClient([text_reply("hello")])).run("hi")
    assert result.output == "hello"


async def test_an_invalid_final_answer_is_reasked_once() -> None:
    run = agent([json_reply({**GOOD, "reason": "bored"}), json_reply(GOOD)])
    result = await run.run("rembourse")
    assert result.outcome.kind == "completed" and result.output.reason == "damaged"
    roles = [m.role for m in result.transcript]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert "reason: Input should be 'damaged', 'late' or 'other'" in result.transcript[2].text
    assert result.turns == 2


async def test_an_answer_invalid_twice_is_a_typed_outcome() -> None:
    result = await agent(["not json", json_reply({"order": "C-1"})]).run("rembourse")
    assert (result.outcome.kind, result.outcome.error) == ("failed", "invalid_output")
    assert "amount: Field required" in result.outcome.reason
    with pytest.raises(RunNotCompleted):
        _ = result.output
    assert result.transcript[-1].role == "assistant"  # the bad answer is on record


async def test_the_reask_is_bounded_by_the_run() -> None:
    result = await agent(["not json", json_reply(GOOD)], limits=Limits(max_turns=1)).run("x")
    assert result.outcome.kind == "turn_cap"
    with pytest.raises(RunNotCompleted):
        _ = result.output


@pytest.mark.parametrize(
    ("fault", "kind"), [("truncated_text", "truncated"), ("refusal", "refused")]
)
async def test_truncated_and_refused_answers_are_typed(fault: str, kind: str) -> None:
    client = FaultyClient(ScriptedClient([json_reply(GOOD)]), {1: fault})  # type: ignore[dict-item]
    result = await Agent(client, output_type=RefundProposal).run("x")
    assert result.outcome.kind == kind


async def test_literal_output_types_go_through_output_type_of() -> None:
    choice = OutputType.of(Literal["yes", "no"])
    result = await Agent(ScriptedClient(['{"value": "yes"}']), output_type=choice).run("ok?")
    assert result.output == "yes"


async def test_resume_after_approval_still_validates() -> None:
    from tether.tools import tool

    @tool(requires_approval=True, thread=False)
    def refund(order: str) -> str:
        """Refund an order. Use it once approved. It moves money."""
        return f"refunded {order}"

    replies = [call_reply(("refund", {"order": "C-1"})), "not json", json_reply(GOOD)]
    run = Agent(ScriptedClient(replies), [refund], output_type=RefundProposal)
    first = await run.run("rembourse")
    assert first.outcome.kind == "awaiting_approval"
    result = await run.resume(first.state, [first.pending[0].approve()])  # type: ignore[arg-type]
    assert isinstance(result.output, RefundProposal)


async def test_an_approval_round_does_not_give_another_reask() -> None:
    from tether.outcomes import RunState
    from tether.tools import tool

    @tool(requires_approval=True, thread=False)
    def refund(order: str) -> str:
        """Refund an order. Use it once approved. It moves money."""
        return f"refunded {order}"

    # invalid, re-asked; then a call that waits for a person; then invalid again
    replies = ["not json", call_reply(("refund", {"order": "C-1"})), "still not json"]
    run = Agent(ScriptedClient(replies), [refund], output_type=RefundProposal)
    first = await run.run("rembourse")
    assert first.outcome.kind == "awaiting_approval"
    state = RunState.from_json(first.state.to_json())  # type: ignore[union-attr]
    result = await run.resume(state, [first.pending[0].approve()])
    assert (result.outcome.kind, result.outcome.error) == ("failed", "invalid_output")
    assert "after 1 re-ask(s)" in result.outcome.reason
    assert sum(m.role == "user" for m in result.transcript) == 2  # the prompt, one re-ask


# Random replies: valid and invalid objects, prose, tool calls, truncation, refusal.
_objects = st.fixed_dictionaries(
    {
        "order": st.text(max_size=5) | st.integers(),
        "amount": st.decimals(allow_nan=False, allow_infinity=False, places=2).map(str)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=4),
        "reason": st.sampled_from(["damaged", "late", "other", "bored", ""]),
    }
)
_reply = st.one_of(
    _objects.map(lambda o: text_reply(json.dumps(o))),
    _objects.map(lambda o: text_reply(json.dumps(o)[:-2])),
    st.text(max_size=20).map(lambda t: text_reply(t or "?")),
    st.just(call_reply(("lire_commande", {"numero": "C-1042"}))),
    _objects.map(lambda o: text_reply(json.dumps(o), stop="max_tokens")),
    st.just(text_reply("I can't.", stop="refusal")),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_reply, min_size=1, max_size=6))
async def test_random_replies_never_return_an_unvalidated_object(replies: list[Any]) -> None:
    result = await agent(replies, limits=Limits(max_turns=len(replies))).run("rembourse")
    if result.outcome.kind != "completed":
        with pytest.raises(RunNotCompleted):
            _ = result.output
        return
    output = result.output
    assert isinstance(output, RefundProposal)
    RefundProposal.model_validate_json(output.model_dump_json(), strict=True)
    assert isinstance(output.amount, Decimal) and output.reason in ("damaged", "late", "other")
    assert result.transcript[-1] == Message.assistant(result.transcript[-1].text)
