"""The embedded model's grammar closes objects and bounds numbers.

An open object let SmolLM2 invent keys until its token cap, and an unbounded number let it
write ``10.0000000000000001000...`` until the cap: both ended ``truncated``. The grammar is
checked here with llguidance's byte tokenizer, so what it accepts is exactly what the
model can write.
"""

from __future__ import annotations

from typing import Literal

import pytest
from llguidance import LLMatcher, LLTokenizer
from pydantic import BaseModel

from tether.providers._local_grammar import grammar_for

TOKENIZER = LLTokenizer("byte")


class Refund(BaseModel):
    order: str
    amount: float
    reason: Literal["damaged", "late", "other"]


def accepts(schema: dict[str, object], text: str) -> bool:
    matcher = LLMatcher(TOKENIZER, grammar_for(schema))
    tokens = TOKENIZER.tokenize_bytes(text.encode())
    return matcher.validate_tokens(tokens) == len(tokens) and not matcher.is_error()


SCHEMA = Refund.model_json_schema()


def test_a_valid_answer_is_accepted() -> None:
    assert accepts(SCHEMA, '{"order":"C-1042","amount":89.9,"reason":"damaged"}')


def test_an_invented_key_is_refused() -> None:
    assert not accepts(SCHEMA, '{"order":"C-1042","amount":89.9,"reason":"late","note":"x"}')


@pytest.mark.parametrize("amount", ["10.0000000000000001000", "1234567890123456789"])
def test_a_number_has_a_digit_bound(amount: str) -> None:
    assert not accepts(SCHEMA, f'{{"order":"C-1042","amount":{amount},"reason":"late"}}')


def test_declared_bounds_and_open_maps_are_kept() -> None:
    from tether.providers._local_grammar import bounded

    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1, "maximum": 5},
            "tags": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    }
    out = bounded(schema)
    assert out["additionalProperties"] is False
    assert out["properties"]["n"] == {"type": "integer", "minimum": 1, "maximum": 5}
    assert out["properties"]["tags"]["additionalProperties"] == {"type": "string"}
    assert accepts(schema, '{"n":3,"tags":{"any":"key"}}')
