"""The helpdesk on the console over HTTP: the customer's reply, notes the customer never
sees, assignment and its inbox filter, waiting time, search (SQLite and PostgreSQL),
saved replies filled from the order, and a degenerate draft that cannot be sent."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from helpers import customer_id, staff_id, ticket, ticket_id_by_order
from sqlalchemy import insert, select, update
from starlette.testclient import TestClient
from webclient import login, wait_for

from tether_desk.assignment import assigned_inbox
from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.models import Message, Staff
from tether_desk.pipeline import Desk
from tether_desk.saved_replies import saved_replies
from tether_desk.search import search
from tether_desk.thread import add_note, customer_reply
from tether_desk.tickets import agent_draft, draft_of
from tether_desk.web.app import create_app

BASE = "http://127.0.0.1"


@pytest.fixture
def client(desk: Desk) -> Iterator[TestClient]:
    with TestClient(create_app(desk), base_url=BASE, follow_redirects=True) as c:
        yield c


@pytest.fixture
def other(client: TestClient) -> Iterator[TestClient]:
    with TestClient(client.app, base_url=BASE, follow_redirects=True) as c:
        yield c


def test_a_customer_reply_reopens_and_a_note_stays_internal(
    desk: Desk, client: TestClient, other: TestClient
) -> None:
    tid = ticket_id_by_order(desk.db, "C-1187")  # tracking: answered by code
    staff_csrf = login(other, "staff")
    wait_for(lambda: ticket(desk.db, tid).status == "answered")
    note = "Client tres presse : verifier le transporteur."
    r = other.post(f"/staff/tickets/{tid}/notes", data={"text": note, "csrftoken": staff_csrf})
    assert r.status_code == 200 and note in r.text and "internal note" in r.text

    csrf = login(client, "marie")
    page = client.get(f"/my/tickets/{tid}").text
    assert "votre commande C-1187" in page and note not in page and "Send and reopen" in page
    r = client.post(
        f"/my/tickets/{tid}/reply", data={"text": "Toujours rien recu !", "csrftoken": csrf}
    )
    assert r.status_code == 200 and "Toujours rien recu" in r.text and note not in r.text
    wait_for(lambda: ticket(desk.db, tid).status == "answered")  # triaged and answered again
    page = client.get(f"/my/tickets/{tid}").text
    assert page.count('class="msg msg-staff"') == 2 and note not in page  # two answers
    assert "The customer reopened the ticket." in page
    kinds = [m["kind"] for m in client.get(f"/api/tickets/{tid}").json()["messages"]]
    assert kinds == ["customer", "staff", "customer", "system", "staff"]  # no note
    staff_kinds = [m["kind"] for m in other.get(f"/api/tickets/{tid}").json()["messages"]]
    assert staff_kinds == ["customer", "staff", "note", "customer", "system", "staff"]


def test_another_customer_cannot_reply_on_the_ticket(desk: Desk, client: TestClient) -> None:
    tid = ticket_id_by_order(desk.db, "C-2210")  # Paul's
    csrf = login(client, "marie")
    r = client.post(f"/my/tickets/{tid}/reply", data={"text": "hello", "csrftoken": csrf})
    assert r.status_code == 404


def test_assignment_filters_the_inbox_and_rows_show_waiting_time(
    desk: Desk, client: TestClient
) -> None:
    with desk.db.write() as s:
        s.execute(insert(Staff).values(email="nora@desk.example", name="Nora", password_hash="x"))
        nora = int(s.scalar(select(Staff.id).where(Staff.name == "Nora")) or 0)
    tid = ticket_id_by_order(desk.db, "C-3107")
    other_tid = ticket_id_by_order(desk.db, "C-2210")
    csrf = login(client, "staff")
    client.post(f"/staff/tickets/{tid}/assign", data={"assignee": "me", "csrftoken": csrf})
    client.post(
        f"/staff/tickets/{other_tid}/assign", data={"assignee": str(nora), "csrftoken": csrf}
    )
    mine = client.get("/staff/inbox?assigned=me").text
    assert (
        f'href="/staff/tickets/{tid}"' in mine and f'href="/staff/tickets/{other_tid}"' not in mine
    )
    assert [r.id for r in assigned_inbox(desk.db, nora).rows] == [other_tid]
    unassigned = [r.id for r in assigned_inbox(desk.db, None).rows]
    assert tid not in unassigned and other_tid not in unassigned and len(unassigned) == 2
    with desk.db.write() as s:  # the customer wrote five hours ago: past the 4 h target
        s.execute(
            update(Message)
            .where(Message.ticket_id == tid)
            .values(created_at=utcnow() - timedelta(hours=5, seconds=30))
        )
    wait_for(lambda: ticket(desk.db, tid).status == "needs_human")
    row = client.get("/staff/inbox?assigned=me").text
    assert 'class="wait late">5 h 00' in row
    client.post(f"/staff/tickets/{tid}/assign", data={"assignee": "", "csrftoken": csrf})
    assert f'href="/staff/tickets/{tid}"' not in client.get("/staff/inbox?assigned=me").text


def test_search_from_the_inbox_finds_subjects_messages_and_notes(
    desk: Desk, client: TestClient
) -> None:
    tid = ticket_id_by_order(desk.db, "C-2210")
    add_note(desk.db, tid, staff_id(desk.db), "Transporteur Colissimo relance le 3.")
    csrf = login(client, "staff")
    assert csrf
    page = client.get("/staff/search", params={"q": "colissi"}).text
    assert f'href="/staff/tickets/{tid}"' in page and "1 ticket(s) match" in page
    page = client.get("/staff/search", params={"q": "adresse livraison"}).text
    assert f'href="/staff/tickets/{ticket_id_by_order(desk.db, "C-3107")}"' in page
    assert "0 ticket(s)" in client.get("/staff/search", params={"q": "zzzyx"}).text
    marie = login(client, "marie")
    assert marie and client.get("/staff/search?q=colis").status_code == 403


def _search_both(db: Database) -> None:
    tid = ticket_id_by_order(db, "C-2210")
    paul = customer_id(db, "paul.martin@client.example")
    customer_reply(db, paul, tid, "Le chargeur électrique manque également.")
    if db.dialect == "sqlite":  # FTS5 folds accents; PostgreSQL's 'simple' keeps them
        assert [h.ticket_id for h in search(db, "electrique")] == [tid]
    assert [h.ticket_id for h in search(db, "électrique")] == [tid]
    assert [h.ticket_id for h in search(db, "CHARG manq")] == [tid]  # every word, prefixes
    assert "chargeur" in search(db, "chargeur")[0].excerpt
    assert {h.ticket_id for h in search(db, "article")} == {tid}  # "Article manquant"
    assert search(db, 'NEAR(" * : ^ -') == []  # query syntax is never passed through
    assert search(db, "   ") == []


def test_search_on_sqlite(db: Database) -> None:
    _search_both(db)


def test_search_on_postgresql(pg_db: Database) -> None:
    _search_both(pg_db)


def test_a_saved_reply_fills_the_orders_facts(desk: Desk, client: TestClient) -> None:
    tid = ticket_id_by_order(desk.db, "C-2210")
    csrf = login(client, "staff")
    page = client.get("/staff/saved-replies").text
    assert "Refund made" in page
    body = "{customer}: {remaining} EUR left on {order}, {unknown}."
    r = client.post(
        "/staff/saved-replies", data={"title": "Remaining", "body": body, "csrftoken": csrf}
    )
    assert r.status_code == 200 and "{remaining} EUR left" in r.text
    chosen = next(r for r in saved_replies(desk.db) if r.title == "Remaining")
    page = client.post(
        f"/staff/tickets/{tid}/saved-reply", data={"reply": chosen.id, "csrftoken": csrf}
    ).text
    assert "Paul Martin: 35.00 EUR left on C-2210, {unknown}." in page
    assert "unfilled placeholders: {unknown}" in page  # flagged for the person who sends


def test_a_looping_agent_draft_is_flagged_and_send_is_refused(
    desk: Desk, client: TestClient
) -> None:
    tid = ticket_id_by_order(desk.db, "C-3107")
    wait_for(lambda: ticket(desk.db, tid).status == "needs_human")
    with desk.db.write_connection() as c:
        agent_draft(c, tid, "Bonjour. " + "89.90 of 89.90 EUR refunded in total. " * 20)
    csrf = login(client, "staff")
    page = client.get(f"/staff/tickets/{tid}").text
    assert 'id="draft-problems"' in page and "20 times" in page and "disabled" in page
    draft = draft_of(desk.db, tid)
    assert draft is not None
    versions = {"ticket_version": ticket(desk.db, tid).version, "draft_version": draft.version}
    r = client.post(f"/staff/tickets/{tid}/send", data={"csrftoken": csrf, **versions})
    assert r.status_code == 422 and "Edit the agent&#39;s draft" in r.text
    assert ticket(desk.db, tid).replied_at is None
