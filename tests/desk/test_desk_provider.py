"""The desk on a real provider adapter: the OpenAI-compatible client (official SDK) against
a local server on 127.0.0.1 that answers in the Chat Completions wire format."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "providers"))

from helpers import pending_approval, refunds_by_order, staff_id, ticket_id_by_order
from provider_server import FakeProvider, Reply, Seen
from provider_wire import c_call, c_completion

from tether.providers.registry import client_from_string
from tether_desk.decisions import decide
from tether_desk.pipeline import Desk, process_ticket
from tether_desk.tickets import draft_of


def support_model(seen: Seen) -> Reply:
    """Triage without tools; with tools: read, propose 12 EUR, then draft."""
    body: dict[str, Any] = seen.body
    messages = body["messages"]
    if not body.get("tools"):
        return Reply(c_completion(json.dumps({"category": "refund"})))
    results = [m for m in messages if m["role"] == "tool"]
    if not results:
        return Reply(
            c_completion(
                None,
                c_call("c1", "read_ticket", {}),
                c_call("c2", "read_order", {}),
                finish="tool_calls",
            )
        )
    if len(results) == 2:
        return Reply(
            c_completion(
                None,
                c_call("c3", "propose_refund", {"amount": 12, "reason": "missing item"}),
                finish="tool_calls",
            )
        )
    return Reply(c_completion(f"Bonjour, {results[-1]['content'][:60]}"))


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    fake = FakeProvider()
    fake.script = support_model
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


async def test_the_pipeline_runs_on_an_openai_compatible_provider(
    desk: Desk, provider: FakeProvider
) -> None:
    client = client_from_string(f"openai-chat:desk-model@{provider.url}/v1", environ={})
    d = Desk(desk.db, client)
    tid = ticket_id_by_order(d.db, "C-2210")
    assert await process_ticket(d, tid) == "awaiting_approval"
    approval = pending_approval(d.db, tid)
    assert approval is not None and approval.amount_cents == 1200
    assert await decide(d, approval.id, staff_id(d.db), approve=True) == "draft_ready"
    assert refunds_by_order(d.db) == {"C-2210": 1200}
    draft = draft_of(d.db, tid)
    assert draft is not None and "Refunded: 12.00 EUR on C-2210" in draft.body
    sent = provider.bodies()
    assert "tools" not in sent[0] or not sent[0]["tools"]  # triage: one call, no tools
    assert sent[0]["response_format"]["type"] == "json_schema"  # structured output, natively
    tools = {t["function"]["name"] for t in sent[1]["tools"]}
    assert tools == {"read_ticket", "read_order", "propose_refund"}
    ticket_result = next(m for m in sent[2]["messages"] if m["role"] == "tool")
    assert json.loads(ticket_result["content"])["provenance"]["trusted"] is False
