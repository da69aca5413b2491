"""ConstrainedToolCalling with a fake inner client (no model): mapping, ids, malformed JSON."""

from __future__ import annotations

import json
from typing import Annotated

import jsonschema
import pytest
from pydantic import BaseModel, Field

from tether.clients import ChatOptions, ResponseDone, TextDelta
from tether.constrained import (
    JSON_SCHEMA,
    ConstrainedToolCalling,
    parse_reply,
    render_history,
    reply_schema,
)
from tether.demo import read_order
from tether.errors import ConfigError
from tether.history import check
from tether.loop import Agent
from tether.messages import Message, StopReason, Text, ToolCall, ToolResult
from tether.providers.scripted import ScriptedClient, text_reply
from tether.tools import tool

CALL = '{"tool_calls": [{"name": "lire_commande", "arguments": {"numero": "C-1042"}}]}'


class Line(BaseModel):
    sku: Annotated[str, Field(pattern=r"^[A-Z]{3}$", description="Product code.")]
    qty: int


@tool(thread=False)
def add_lines(lines: Annotated[list[Line], "Lines to add."]) -> str:
    """Add lines to the cart. Use it to order. It does not pay."""
    return f"{len(lines)} line(s) added"


def wrap(*replies: str, stop: str = "stop") -> tuple[ConstrainedToolCalling, ScriptedClient]:
    inner = ScriptedClient([text_reply(r, stop=stop) for r in replies])
    return ConstrainedToolCalling(inner), inner


async def test_a_call_is_mapped_to_a_tool_call_and_the_inner_sees_no_tools() -> None:
    client, inner = wrap(CALL)
    response = await client.complete(
        [Message.user("Where is C-1042?")], [read_order.spec], ChatOptions(instructions="Be kind.")
    )
    (call,) = response.message.tool_calls
    assert call.name == "lire_commande"
    assert call.arguments == {"numero": "C-1042"}
    assert call.id.startswith("call_") and len(call.id) > 10
    assert response.stop_reason.value == "tool_calls"
    sent = inner.requests[0]
    assert sent.tools == ()
    assert sent.options.extra[JSON_SCHEMA] == reply_schema([read_order.spec])
    instructions = sent.options.instructions or ""
    assert instructions.startswith("Be kind.")
    assert "lire_commande" in instructions and r"pattern ^C-\d{4}$" in instructions


async def test_several_calls_get_distinct_ids() -> None:
    two = (
        '{"tool_calls": [{"name": "lire_commande", "arguments": {"numero": "C-1042"}},'
        ' {"name": "lire_commande", "arguments": {"numero": "C-2210"}}]}'
    )
    client, _ = wrap(two, two)
    first = await client.complete([Message.user("both")], [read_order.spec], ChatOptions())
    second = await client.complete([Message.user("both")], [read_order.spec], ChatOptions())
    ids = [c.id for r in (first, second) for c in r.message.tool_calls]
    assert [c.arguments["numero"] for c in first.message.tool_calls] == ["C-1042", "C-2210"]
    assert len(set(ids)) == 4


async def test_an_answer_becomes_text_with_the_stop_reason_kept() -> None:
    client, _ = wrap('{"answer": "It has shipped."}')
    response = await client.complete([Message.user("hi")], [read_order.spec], ChatOptions())
    assert response.message.parts == (Text("It has shipped."),)
    assert response.stop_reason.value == "stop"


def test_a_truncated_call_keeps_its_text_and_the_truncated_stop() -> None:
    cut = '{"tool_calls": [{"name": "lire_commande", "arguments": {"numero": "C-10'
    parts, stop = parse_reply(cut, StopReason.parse("length"))
    (call,) = parts
    assert isinstance(call, ToolCall)
    assert call.name == "lire_commande" and call.malformed
    assert call.raw_arguments == '{"numero": "C-10'  # its own arguments, not the envelope
    assert stop.truncated


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The order has shipped.", [Text("The order has shipped.")]),
        ('{"answer": "cut', [Text('{"answer": "cut')]),
        ('{"other": 1}', [Text('{"other": 1}')]),
        ("", []),
    ],
)
def test_text_that_is_no_call_becomes_an_answer(text: str, expected: list[Text]) -> None:
    parts, stop = parse_reply(text, StopReason.parse("stop"))
    assert parts == expected
    assert stop.value == "stop"


def test_odd_call_shapes_become_malformed_calls_not_exceptions() -> None:
    reply = json.dumps(
        {"tool_calls": [{"name": "x", "arguments": "{bad"}, {"name": 3, "arguments": [1]}, 7]}
    )
    parts, _ = parse_reply(reply, StopReason.parse("stop"))
    assert [(p.name, p.raw_arguments) for p in parts if isinstance(p, ToolCall)] == [
        ("x", "{bad"),
        ("", "[1]"),
        ("", "7"),
    ]


async def test_a_truncated_call_is_never_run_by_the_loop() -> None:
    cut = '{"tool_calls": [{"name": "lire_commande", "arguments": {"numero": "C-10'
    client, _ = wrap(cut, stop="length")
    result = await Agent(client, [read_order]).run("Where is C-1042?")
    assert result.outcome.kind == "truncated"
    results = result.transcript[-1].tool_results
    assert results and results[0].is_error and "Not executed" in results[0].content
    assert check(result.transcript) == []


async def test_a_malformed_call_gets_an_error_result_and_the_model_recovers() -> None:
    client, inner = wrap('{"tool_calls": [{"name": "lire_commande", "arguments": "{oops"}]}', CALL)
    inner._replies.append(text_reply('{"answer": "Shipped."}', stop="stop"))
    result = await Agent(client, [read_order]).run("Where is C-1042?")
    assert result.outcome.kind == "completed" and result.output == "Shipped."
    first, second = result.transcript[2], result.transcript[4]
    assert first.tool_results[0].is_error
    assert not second.tool_results[0].is_error and "expediee" in second.tool_results[0].content
    assert check(result.transcript) == []
    # the model read the results as text, with the tool's name and arguments
    last_prompt = inner.requests[-1].messages
    assert all(not m.tool_calls and not m.tool_results for m in last_prompt)
    assert 'lire_commande({"numero":"C-1042"}) returned:' in last_prompt[-1].text


def test_history_renders_calls_as_json_and_results_as_user_text() -> None:
    call = ToolCall("c1", "lire_commande", {"numero": "C-1042"})
    history = [
        Message.user("Where is C-1042?"),
        Message.assistant("Looking.", call),
        Message.results([ToolResult("c1", "No order.", is_error=True)]),
        Message.user("And now?"),
    ]
    rendered = render_history(history)
    assert [m.role for m in rendered] == ["user", "assistant", "user"]
    assert json.loads(rendered[1].text) == {
        "tool_calls": [{"name": "lire_commande", "arguments": {"numero": "C-1042"}}]
    }
    assert "ERROR: No order." in rendered[2].text and rendered[2].text.endswith("And now?")


def test_reply_schema_accepts_valid_calls_and_answers_only() -> None:
    schema = reply_schema([read_order.spec, add_lines.spec])
    jsonschema.Draft202012Validator.check_schema(schema)
    ok = [
        json.loads(CALL),
        {"tool_calls": [{"name": "add_lines", "arguments": {"lines": [{"sku": "ABC", "qty": 2}]}}]},
        {"answer": "Hello"},
    ]
    bad = [
        {"tool_calls": [{"name": "lire_commande", "arguments": {"numero": "1042"}}]},
        {"tool_calls": [{"name": "rm_rf", "arguments": {}}]},
        {"tool_calls": []},
        {"tool_calls": [{"name": "add_lines", "arguments": {"lines": [{"sku": "abc", "qty": 1}]}}]},
        {"answer": 3},
        {"answer": "x", "extra": 1},
    ]
    validator = jsonschema.Draft202012Validator(schema)
    assert all(validator.is_valid(v) for v in ok)
    assert not any(validator.is_valid(v) for v in bad)
    assert "$defs" in schema and all(k.startswith("t1_") for k in schema["$defs"])


async def test_a_structured_answer_schema_replaces_the_string_answer() -> None:
    answer = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    client, inner = wrap('{"answer": {"ok": true}}')
    options = ChatOptions(extra={JSON_SCHEMA: answer})
    response = await client.complete([Message.user("ok?")], [read_order.spec], options)
    assert json.loads(response.message.text) == {"ok": True}
    sent = inner.requests[0].options.extra[JSON_SCHEMA]
    assert sent["anyOf"][1]["properties"]["answer"] == answer


async def test_an_output_schema_becomes_the_answer_schema() -> None:
    from tether.clients import OutputSchema

    answer = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    client, inner = wrap('{"answer": {"ok": false}}')
    options = ChatOptions(output_schema=OutputSchema("Ok", answer))
    response = await client.complete([Message.user("ok?")], [read_order.spec], options)
    assert json.loads(response.message.text) == {"ok": False}
    sent = inner.requests[0].options
    assert sent.extra[JSON_SCHEMA]["anyOf"][1]["properties"]["answer"] == answer
    assert sent.output_schema is None  # the whole reply is constrained by the extra schema


async def test_without_tools_the_request_passes_through() -> None:
    client, inner = wrap("plain words")
    response = await client.complete([Message.user("hi")], [], ChatOptions())
    assert response.message.text == "plain words"
    assert JSON_SCHEMA not in inner.requests[0].options.extra


async def test_stream_yields_the_answer_then_the_response() -> None:
    client, _ = wrap('{"answer": "Done."}')
    chunks = [
        c async for c in client.stream([Message.user("hi")], [read_order.spec], ChatOptions())
    ]
    assert isinstance(chunks[0], TextDelta) and chunks[0].text == "Done."
    assert isinstance(chunks[-1], ResponseDone) and chunks[-1].response.message.text == "Done."


# --- tool_choice ----------------------------------------------------------------------------


async def test_required_leaves_out_the_answer() -> None:
    client, inner = wrap(CALL)
    options = ChatOptions(tool_choice="required")
    response = await client.complete([Message.user("hi")], [read_order.spec], options)
    assert response.message.tool_calls[0].name == "lire_commande"
    sent = inner.requests[0].options
    schema = sent.extra[JSON_SCHEMA]
    validator = jsonschema.Draft202012Validator(schema)
    assert not validator.is_valid({"answer": "no call"})
    assert validator.is_valid(json.loads(CALL))
    assert '{"answer"' not in (sent.instructions or "")
    assert sent.tool_choice is None  # the inner client sees no tools, so no choice


async def test_a_named_tool_is_the_only_call_the_schema_allows() -> None:
    client, inner = wrap(CALL)
    options = ChatOptions(tool_choice="add_lines")
    await client.complete([Message.user("hi")], [read_order.spec, add_lines.spec], options)
    sent = inner.requests[0].options
    validator = jsonschema.Draft202012Validator(sent.extra[JSON_SCHEMA])
    assert not validator.is_valid(json.loads(CALL))
    assert not validator.is_valid({"answer": "x"})
    assert validator.is_valid(
        {"tool_calls": [{"name": "add_lines", "arguments": {"lines": [{"sku": "ABC", "qty": 1}]}}]}
    )
    instructions = sent.instructions or ""
    assert "add_lines" in instructions and "lire_commande" not in instructions


HISTORY_WITH_CALLS = [
    Message.user("Where is C-1042?"),
    Message.assistant(ToolCall("c1", "lire_commande", {"numero": "C-1042"})),
    Message.results([ToolResult("c1", '{"statut": "expediee"}')]),
]


@pytest.mark.parametrize("tools", [[read_order.spec], []])
@pytest.mark.parametrize("stream", [False, True])
async def test_none_or_no_tools_on_a_history_with_calls_asks_for_text(
    tools: list[object], stream: bool
) -> None:
    client, inner = wrap("It has shipped.")
    options = ChatOptions(tool_choice="none" if tools else None)
    if stream:
        chunks = [c async for c in client.stream(HISTORY_WITH_CALLS, tools, options)]  # type: ignore[arg-type]
        done = chunks[-1]
        assert isinstance(done, ResponseDone)
        response = done.response
    else:
        response = await client.complete(HISTORY_WITH_CALLS, tools, options)  # type: ignore[arg-type]
    assert response.message.text == "It has shipped." and not response.message.tool_calls
    sent = inner.requests[0]
    assert sent.tools == () and JSON_SCHEMA not in sent.options.extra
    assert all(not m.tool_calls and not m.tool_results for m in sent.messages)
    assert 'lire_commande({"numero":"C-1042"}) returned' in sent.messages[-1].text
    assert '{"answer"' not in sent.messages[-1].text  # no JSON format asked for


async def test_a_choice_naming_no_tool_is_refused() -> None:
    client, inner = wrap(CALL)
    with pytest.raises(ConfigError, match="not a tool of the request"):
        await client.complete(
            [Message.user("hi")], [read_order.spec], ChatOptions(tool_choice="nope")
        )
    assert inner.requests == []


def test_reply_schema_for_none_is_the_answer_only() -> None:
    validator = jsonschema.Draft202012Validator(reply_schema([read_order.spec], tool_choice="none"))
    assert validator.is_valid({"answer": "x"})
    assert not validator.is_valid(json.loads(CALL))


async def test_max_calls_caps_the_calls_of_one_reply_in_the_schema() -> None:
    two = {"tool_calls": [json.loads(CALL)["tool_calls"][0]] * 2}
    one = {"tool_calls": two["tool_calls"][:1]}
    capped = jsonschema.Draft202012Validator(reply_schema([read_order.spec], max_calls=1))
    assert capped.is_valid(one) and not capped.is_valid(two)
    assert jsonschema.Draft202012Validator(reply_schema([read_order.spec])).is_valid(two)
    client, inner = wrap(CALL)
    client = ConstrainedToolCalling(inner, max_calls=1)
    await client.complete([Message.user("C-1042?")], [read_order.spec], ChatOptions())
    sent = inner.requests[0].options.extra[JSON_SCHEMA]
    assert not jsonschema.Draft202012Validator(sent).is_valid(two)
    with pytest.raises(ValueError, match="at least 1"):
        ConstrainedToolCalling(inner, max_calls=0)
