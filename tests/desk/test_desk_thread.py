"""Tickets as threads: migration to one-message threads, the customer's reply that reopens
and re-runs triage and the agent on the thread, provenance of each message up to the
approval screen, visibility, and the agent's request bounded however long the thread."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from helpers import customer_id, pending_approval, staff_id, ticket, ticket_id_by_order
from sqlalchemy import select, text

from tether.clients import ChatOptions, ChatResponse
from tether.messages import Message
from tether.tokens import estimate_tokens
from tether.tools import ToolSpec
from tether_desk.agent import REFUND_PROMPT, refund_agent
from tether_desk.approvals import screen
from tether_desk.db import MIGRATIONS, Database, sqlite_url
from tether_desk.decisions import decide
from tether_desk.errors import InvalidInput
from tether_desk.helpdesk import HelpdeskSettings
from tether_desk.models import Message as MessageRow
from tether_desk.pipeline import Desk, load_scope, process_ticket
from tether_desk.scripted import DeskScriptedModel
from tether_desk.thread import add_note, customer_reply, thread
from tether_desk.thread_store import add_message
from tether_desk.tickets import save_draft, send_reply
from tether_desk.trace import RunRecorder, run_events


async def _answered_refund(desk: Desk) -> int:
    """C-2210's ticket (12 EUR missing) refunded, its draft sent: answered."""
    tid = ticket_id_by_order(desk.db, "C-2210")
    await process_ticket(desk, tid)
    approval = pending_approval(desk.db, tid)
    assert approval is not None
    await decide(desk, approval.id, staff_id(desk.db), approve=True)
    send_reply(desk.db, tid, staff_id(desk.db))
    assert ticket(desk.db, tid).status == "answered"
    return tid


def _upgrade(db: Database, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with db.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def test_existing_tickets_become_one_message_threads(tmp_path: Path) -> None:
    db = Database(sqlite_url(tmp_path / "old.db"))
    _upgrade(db, "0002")
    with db.engine.begin() as c:
        c.execute(text("INSERT INTO customers VALUES (1, 'a@x.example', 'Ann', 'h')"))
        c.execute(
            text(
                "INSERT INTO orders (id, number, customer_id, status, amount_paid_cents, currency,"
                " shipping_address, payment_method, created_at) VALUES (1, 'C-1', 1, 'shipped',"
                " 100, 'EUR', 'a', 'card', '2026-01-01 10:00:00')"
            )
        )
        for i, reply in ((1, None), (2, "Done, refunded.")):
            c.execute(
                text(
                    "INSERT INTO tickets (id, customer_id, order_id, subject, body, status,"
                    " reply, created_at, updated_at, replied_at) VALUES (:i, 1, 1, 'Broken',"
                    " :body, :status, :reply, '2026-01-02 10:00:00', '2026-01-02 10:00:00',"
                    " :replied)"
                ),
                {
                    "i": i,
                    "body": f"ticket {i} vase cassé",
                    "status": "answered" if reply else "needs_human",
                    "reply": reply,
                    "replied": "2026-01-02 11:00:00" if reply else None,
                },
            )
    _upgrade(db, "head")
    assert [(m.kind, m.body) for m in thread(db, 1, staff=True)] == [
        ("customer", "ticket 1 vase cassé")
    ]
    assert [(m.kind, m.body) for m in thread(db, 2, staff=True)] == [
        ("customer", "ticket 2 vase cassé"),
        ("staff", "Done, refunded."),
    ]
    with db.read_connection() as c:  # the old messages are searchable, accents folded
        found = c.execute(text("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'casse'"))
        assert sorted(r[0] for r in found) == [1, 2]
    db.dispose()


async def test_a_reply_reopens_and_the_agent_cites_the_new_message(desk: Desk) -> None:
    tid = await _answered_refund(desk)
    paul = customer_id(desk.db, "paul.martin@client.example")
    assert customer_reply(desk.db, paul, tid, "Un deuxieme article manque aussi : 8 EUR.")
    assert ticket(desk.db, tid).status == "new"
    assert await process_ticket(desk, tid) == "awaiting_approval"
    approval = pending_approval(desk.db, tid)
    assert approval is not None and approval.amount_cents == 800
    new_id = max(m.id for m in thread(desk.db, tid, staff=True) if m.kind == "customer")
    origins = {o.argument: o for o in screen(desk.db, approval.id).origins}
    assert f"message #{new_id}" in origins["amount"].origin
    assert origins["amount"].risky  # the customer's words: third party
    kinds = [m.kind for m in thread(desk.db, tid, staff=True)]
    # asked, refund approved, drafted, sent; asked again, which reopened it
    assert kinds == ["customer", "system", "agent", "staff", "customer", "system"]


async def test_triage_reads_every_customer_message(desk: Desk) -> None:
    tid = ticket_id_by_order(desk.db, "C-3107")  # "change my address": other
    assert await process_ticket(desk, tid) == "needs_human"
    lea = customer_id(desk.db, "lea.bernard@client.example")
    assert customer_reply(desk.db, lea, tid, "Et le colis est arrive casse, remboursez 20 EUR.")
    scope = load_scope(desk.db, tid)
    assert "adresse" in scope.body and "casse" in scope.body
    assert await process_ticket(desk, tid) == "awaiting_approval"


async def test_reopening_is_refused_after_the_window(desk: Desk) -> None:
    tid = await _answered_refund(desk)
    paul = customer_id(desk.db, "paul.martin@client.example")
    closed = HelpdeskSettings(reopen_window=timedelta(seconds=0))
    with pytest.raises(InvalidInput, match="open a new ticket"):
        customer_reply(desk.db, paul, tid, "encore moi", closed)
    assert ticket(desk.db, tid).status == "answered"
    marie = customer_id(desk.db, "marie.dupont@client.example")
    with pytest.raises(Exception, match="No such ticket"):
        customer_reply(desk.db, marie, tid, "not my ticket")


async def test_notes_and_drafts_are_never_shown_to_the_customer(desk: Desk) -> None:
    tid = await _answered_refund(desk)
    add_note(desk.db, tid, staff_id(desk.db), "Client fidele, geste commercial possible.")
    customer_view = thread(desk.db, tid, staff=False)
    staff_view = thread(desk.db, tid, staff=True)
    assert {m.kind for m in customer_view} == {"customer", "staff", "system"}
    assert not any("geste commercial" in m.body for m in customer_view)
    assert "note" in {m.kind for m in staff_view} and "agent" in {m.kind for m in staff_view}
    events = [m.body for m in customer_view if m.kind == "system"]
    assert events == ["Refund of 12.00 EUR approved by Camille (support)."]


class Recording(DeskScriptedModel):
    """The scripted model, keeping every request's estimated size."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        spec = json.dumps([t.parameters for t in tools]) + "".join(t.description for t in tools)
        self.sizes.append(estimate_tokens(messages, len(options.instructions or "") + len(spec)))
        return await super().complete(messages, tools, options)


AGENT_TOKEN_BOUND = 4_000
"""The most tokens one request of the refund agent may take, whatever the thread's length."""


async def test_a_200_message_thread_keeps_the_agents_request_bounded(desk: Desk) -> None:
    tid = ticket_id_by_order(desk.db, "C-2210")
    para = "Je precise encore une fois le probleme avec ma commande et le colis. " * 12
    with desk.db.write_connection() as c:
        add_message(c, tid, "system", "Refund of 3.00 EUR approved by Camille (support).")
        for i in range(199):
            kind = ("customer", "staff", "note", "agent")[i % 4]
            add_message(c, tid, kind, f"{i}: {para}", public=kind in ("customer", "staff"))
        add_message(c, tid, "customer", "Finalement il manque 9 EUR, merci.")
    with desk.db.read() as s:
        stored = s.scalars(select(MessageRow.body).where(MessageRow.ticket_id == tid)).all()
    assert len(stored) == 202
    whole_thread = sum(len(b) for b in stored) // 4
    assert whole_thread > 10 * AGENT_TOKEN_BOUND  # sending it all would not fit the bound
    model = Recording()
    recorder = RunRecorder(desk.db, "long-thread", tid, "refund").start()
    agent = refund_agent(model, desk.db, load_scope(desk.db, tid), [recorder])
    result = await agent.run(REFUND_PROMPT, run_id="long-thread")
    recorder.flush()
    assert result.outcome.kind == "awaiting_approval"
    assert result.state is not None and result.state.pending[0].arguments["amount"] == 9
    assert len(model.sizes) >= 2 and max(model.sizes) < AGENT_TOKEN_BOUND
    read = next(r for m in result.transcript for r in m.tool_results if '"thread"' in r.content)
    content = json.loads(read.content)["content"]
    assert content["text"] == "Finalement il manque 9 EUR, merci."
    assert content["thread_left_out"].startswith("189 older message(s) left out")
    assert content["thread_summary"].endswith(
        "Latest events among them: Refund of 3.00 EUR approved by Camille (support)."
    )
    sources = {e["from"]: e["source"] for e in content["thread"]}
    assert "third party" in sources["customer"] and "trusted staff" in sources["note"]
    assert "model content" in sources["agent"]
    # the run's trace says what the model was not shown
    [read_row] = [e for e in run_events(desk.db, "long-thread") if e.kind == "tool_finished"][:1]
    assert read_row.data["context"] == (
        "thread trimmed for the model: 189 older message(s) left out; the newest are shown; "
        "12 shown cut to 400 characters Those left out: 48 from the customer, 47 staff "
        "replies, 47 internal notes, 46 earlier drafts, 1 event(s). Latest events among them: "
        "Refund of 3.00 EUR approved by Camille (support)."
    )


async def test_a_degenerate_agent_draft_cannot_be_sent_unedited(db: Database) -> None:
    from tether_desk.tickets import agent_draft

    tid = ticket_id_by_order(db, "C-1042")
    loop = "Bonjour. " + "89.90 of 89.90 EUR refunded in total. " * 20
    with db.write_connection() as c:
        agent_draft(c, tid, loop)
    with pytest.raises(InvalidInput, match=r"repeats .* 20 times"):
        send_reply(db, tid, staff_id(db))
    assert ticket(db, tid).status == "draft_ready"
    save_draft(db, tid, "Bonjour, 89.90 EUR vous ont ete rembourses.", "staff")
    send_reply(db, tid, staff_id(db))
    assert ticket(db, tid).status == "answered"


def test_draft_problems_name_repetition_length_and_placeholders() -> None:
    from tether_desk.draft_quality import problems, tidy

    assert problems("Bonjour Paul, 12.00 EUR ont ete rembourses sur C-2210. Bonne journee.") == []
    assert any("placeholders: {order}" in p for p in problems("Votre commande {order} part."))
    assert any("[AMOUNT]" in p for p in problems("Nous remboursons [AMOUNT] EUR."))
    assert any("characters long" in p for p in problems("Texte varie numero. " * 30 + "x" * 900))
    looped = "Bonjour. " + "89.90 of 89.90 EUR refunded in total. " * 20
    assert tidy(looped) == "Bonjour. 89.90 of 89.90 EUR refunded in total."
    # what the embedded model wrote: the tool's result, looping, cut by the length limit
    cut = (
        "Refunded: 1.00 EUR on C-2210; 1.00 of 35.00 EUR refunded in total. "
        "1.00 of 35.00 EUR refunded in total. 1.00 of 35.00 EUR refunded in"
    )
    assert problems(cut) == ["It stops in the middle of a sentence it already wrote."]
    assert problems("Bonjour. C'est fait. C'est fait.") == ['It repeats "c est fait" 2 times.']
    assert tidy(cut) == "Refunded: 1.00 EUR on C-2210; 1.00 of 35.00 EUR refunded in total."
    assert problems(tidy(cut)) == []
    assert problems("Bonjour Paul,\n\nC'est fait.\n\nCordialement,\nLe support") == []


def test_the_small_models_reply_is_tidied_before_it_becomes_a_draft() -> None:
    from tether.messages import Text
    from tether_desk.small_model import _unwrapped

    looped = json.dumps({"answer": "Bonjour. " + "89.90 of 89.90 EUR refunded in total. " * 20})
    reply = _unwrapped(Message("assistant", (Text(looped),)))
    assert reply.text == "Bonjour. 89.90 of 89.90 EUR refunded in total."


def test_pipeline_sees_a_new_ticket_as_its_first_message(db: Database) -> None:
    from tether_desk.tickets import open_ticket

    marie = customer_id(db, "marie.dupont@client.example")
    tid = open_ticket(db, marie, "C-1187", "Retard", "Ma commande n'arrive pas.")
    assert [(m.kind, m.author) for m in thread(db, tid, staff=False)] == [
        ("customer", "Marie Dupont")
    ]
