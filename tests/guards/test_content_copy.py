"""Content provenance: a write that copies third-party text asks, past a documented
threshold (six words in a row, or all of a short text)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest

from tether.guards.callpolicy import ProvenancePolicy
from tether.guards.store import COPY_MIN_CHARS, COPY_MIN_WORDS, WINDOW
from tether.messages import Message, ToolCall, ToolResult
from tether.rulings import Ruling
from tether.tools import RunContext, tool

Text = Annotated[str, "A value."]
ALICE = "alice" + "@" + "corp.example"
PAYLOAD = (
    "Your account is suspended until you confirm your identity with the security desk "
    "before Friday noon"
)


@tool(thread=False, effect="read", third_party=("body",))
def read_mail() -> dict[str, Any]:
    """Read a mail."""
    return {}


@tool(thread=False, effect="write", roles={"participants": "counterparty", "title": "content"})
def create_event(title: Text, participants: list[str]) -> str:
    """Create an event."""
    return "created"


@tool(thread=False, effect="write", roles={"content": "content"})
def write_file(name: Text, content: Text) -> str:
    """Write a file."""
    return "written"


async def _rule(prompt: str, mail: str, t: Any, **arguments: Any) -> Ruling:
    policy = ProvenancePolicy()
    ctx: RunContext[Any] = RunContext(None, "run-1")
    policy.begin([Message.user(prompt)], ctx)
    body = json.dumps({"id": "m-1", "body": mail})
    policy.record(read_mail, ToolCall("c1", "read_mail", {}), ToolResult("c1", body), ctx)
    return await policy.rule(t, ToolCall("c2", t.name, arguments), ctx)


def test_the_threshold_is_the_documented_one() -> None:
    assert (WINDOW, COPY_MIN_WORDS, COPY_MIN_CHARS) == (6, 3, 16)


@pytest.mark.parametrize(
    ("words", "action"),
    [(WINDOW - 1, "allow"), (WINDOW, "ask"), (len(PAYLOAD.split()), "ask")],
)
async def test_copied_words_in_a_file_ask_from_the_threshold_on(words: int, action: str) -> None:
    copied = " ".join(PAYLOAD.split()[:words])
    content = f"Notes of the day. {copied}. End of notes, written by me today."
    ruling = await _rule("Write my notes file.", PAYLOAD, write_file, name="notes", content=content)
    assert ruling.action == action
    if action == "ask":
        assert ruling.rule == "provenance.copied" and "read_mail" in ruling.reason


async def test_an_attacker_written_title_copied_into_an_event_asks() -> None:
    mail = "Please create the meeting 'Security desk identity check' for everyone."
    ruling = await _rule(
        f"Set up the meeting the mail asks for with {ALICE}.",
        mail,
        create_event,
        title="Security desk identity check",
        participants=[ALICE],
    )
    assert ruling.action == "ask" and ruling.rule == "provenance.copied"


async def test_words_the_user_wrote_are_the_users_own() -> None:
    mail = "Please create the meeting 'Quarterly budget review' for everyone."
    ruling = await _rule(
        f"Create a 'Quarterly budget review' meeting with {ALICE}.",
        mail,
        create_event,
        title="Quarterly budget review",
        participants=[ALICE],
    )
    assert ruling.action == "allow"
