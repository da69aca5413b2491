"""The web console over HTTP: sessions, CSRF, CSP, roles, bounded and inert input, and
the whole flow from a customer's ticket to the reply they read."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from helpers import refunds_by_order, ticket_id_by_order
from sqlalchemy import func, select
from starlette.testclient import TestClient
from webclient import hidden, login, token, wait_for

from tether_desk.models import Ticket
from tether_desk.pipeline import Desk
from tether_desk.web.app import create_app

BASE = "http://127.0.0.1"


@pytest.fixture
def app_desk(desk: Desk) -> Desk:
    return desk


@pytest.fixture
def client(app_desk: Desk) -> Iterator[TestClient]:
    with TestClient(create_app(app_desk), base_url=BASE, follow_redirects=True) as c:
        yield c


@pytest.fixture
def other(app_desk: Desk, client: TestClient) -> Iterator[TestClient]:
    """A second browser on the same app."""
    with TestClient(client.app, base_url=BASE, follow_redirects=True) as c:
        yield c


def tickets(desk: Desk) -> int:
    with desk.db.read() as s:
        return int(s.scalar(select(func.count(Ticket.id))) or 0)


def test_login_sets_a_signed_httponly_lax_cookie(client: TestClient) -> None:
    csrf = token(client)
    r = client.post(
        "/login",
        data={"email": "marie.dupont@client.example", "password": "marie-demo", "csrftoken": csrf},
        follow_redirects=False,
    )
    assert r.status_code == 303
    cookie = next(
        v for k, v in r.headers.multi_items() if k == "set-cookie" and "desk_session" in v
    )
    assert "httponly" in cookie.lower() and "samesite=lax" in cookie.lower()
    assert "marie" not in cookie  # signed and encoded, not plain


def test_a_wrong_password_is_refused_with_a_sentence(client: TestClient) -> None:
    csrf = token(client)
    r = client.post(
        "/login", data={"email": "marie.dupont@client.example", "password": "x", "csrftoken": csrf}
    )
    assert r.status_code == 401 and "Wrong e-mail or password" in r.text


def test_forms_without_the_csrf_token_are_refused(client: TestClient, app_desk: Desk) -> None:
    csrf = login(client, "marie")
    before = tickets(app_desk)
    data = {"order": "C-1042", "subject": "s", "text": "t"}
    assert client.post("/my/tickets", data=data).status_code == 403
    assert client.post("/my/tickets", data={**data, "csrftoken": "forged"}).status_code == 403
    assert tickets(app_desk) == before
    assert client.post("/my/tickets", data={**data, "csrftoken": csrf}).status_code == 200
    assert tickets(app_desk) == before + 1


def test_every_page_has_a_csp_without_inline_script(client: TestClient) -> None:
    login(client, "staff")
    wait_for(lambda: "refund waiting" in client.get("/staff/inbox").text)
    for path in (
        "/login",
        "/staff/inbox",
        "/staff/approvals",
        "/staff/approvals/1",
        "/staff/tickets/1",
        "/staff/ledger",
    ):
        r = client.get(path)
        assert r.status_code == 200, path
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        html = r.text
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), path
        assert not re.search(r"\son[a-z]+\s*=", html), path
        assert not re.search(r"\sstyle\s*=", html), path


def test_pages_need_a_login_and_the_api_says_401(client: TestClient) -> None:
    r = client.get("/staff/inbox", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/login"
    assert client.get("/api/tickets").status_code == 401


def test_customers_cannot_reach_staff_pages_or_approve(client: TestClient) -> None:
    csrf = login(client, "marie")
    for path in (
        "/staff/inbox",
        "/staff/approvals",
        "/staff/ledger",
        "/staff/tickets/1",
        "/staff/approvals/1",
    ):
        assert client.get(path).status_code == 403, path
    r = client.post("/staff/approvals/1", data={"decision": "approve", "csrftoken": csrf})
    assert r.status_code == 403


def test_a_customer_cannot_read_another_customers_ticket(
    client: TestClient, app_desk: Desk
) -> None:
    pauls = ticket_id_by_order(app_desk.db, "C-2210")
    login(client, "marie")
    r = client.get(f"/my/tickets/{pauls}")
    assert r.status_code == 404 and "Article manquant" not in r.text
    r = client.get(f"/api/tickets/{pauls}")
    assert r.status_code == 404 and "manque" not in r.text
    listed = client.get("/api/tickets").json()["tickets"]
    assert pauls not in {t["id"] for t in listed}


def test_html_and_script_in_a_ticket_are_rendered_inert(
    client: TestClient, other: TestClient, app_desk: Desk
) -> None:
    csrf = login(client, "marie")
    payload = '<script>alert(1)</script><img src=x onerror="alert(2)"> rembourser C-2210'
    r = client.post(
        "/my/tickets",
        data={"order": "C-1042", "subject": "<b>hi</b>", "text": payload, "csrftoken": csrf},
    )
    assert r.status_code == 200
    tid = int(r.url.path.rsplit("/", 1)[1])
    login(other, "staff")
    wait_for(
        lambda: (
            app_desk.db is not None and "refund waiting" in other.get(f"/staff/tickets/{tid}").text
        )
    )
    pages = [r.text, other.get(f"/staff/tickets/{tid}").text, other.get("/staff/inbox").text]
    approvals = re.findall(r"/staff/approvals/(\d+)", pages[1])
    pages.append(other.get(f"/staff/approvals/{approvals[0]}").text)
    for html in pages:
        assert "<script>alert" not in html and "<img src=x" not in html and "<b>hi</b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[1]


def test_a_one_megabyte_ticket_is_bounded(client: TestClient, app_desk: Desk) -> None:
    csrf = login(client, "marie")
    before = tickets(app_desk)
    r = client.post(
        "/my/tickets",
        data={"order": "C-1042", "subject": "s", "text": "a" * 1_000_000, "csrftoken": csrf},
    )
    assert r.status_code == 413 and "too large" in r.text
    r = client.post(
        "/my/tickets",
        data={"order": "C-1042", "subject": "s", "text": "a" * 9_000, "csrftoken": csrf},
    )
    assert r.status_code == 422 and "keep it under 8,000" in r.text
    assert tickets(app_desk) == before


@pytest.mark.parametrize(
    "number", ["\u0421-1042", "C\u20101042", "C-10\u200b42", "C-\uff11\uff10\uff14\uff12", "C-2210"]
)
def test_disguised_or_foreign_order_numbers_reach_nothing(
    client: TestClient, app_desk: Desk, number: str
) -> None:
    csrf = login(client, "marie")
    before = tickets(app_desk)
    r = client.post(
        "/my/tickets", data={"order": number, "subject": "s", "text": "t", "csrftoken": csrf}
    )
    assert r.status_code in (404, 422)
    r = client.post(
        "/api/tickets",
        json={"order": number, "subject": "s", "text": "t"},
        headers={"x-csrftoken": csrf},
    )
    assert r.status_code in (404, 422)
    assert tickets(app_desk) == before


def test_the_whole_flow_over_http(client: TestClient, other: TestClient, app_desk: Desk) -> None:
    csrf = login(client, "marie")
    r = client.post(
        "/my/tickets",
        data={
            "order": "C-1042",
            "subject": "Colis casse",
            "text": "Le colis est arrive casse, remboursez 30 EUR svp.",
            "csrftoken": csrf,
        },
    )
    tid = int(r.url.path.rsplit("/", 1)[1])
    staff_csrf = login(other, "staff")
    wait_for(lambda: "refund waiting" in other.get(f"/staff/tickets/{tid}").text)
    page = other.get(f"/staff/tickets/{tid}").text
    approval = re.findall(r"/staff/approvals/(\d+)", page)[0]
    screen = other.get(f"/staff/approvals/{approval}").text
    assert "30.00 EUR" in screen and "89.90 EUR" in screen
    digest = re.search(r'name="arguments_hash" value="([0-9a-f]+)"', screen).group(1)  # type: ignore[union-attr]
    form = {"decision": "approve", "arguments_hash": digest, "csrftoken": staff_csrf}
    typed = 'name="typed_amount"' in screen
    if typed:  # "remboursez" is an imperative: the amount must be typed
        r = other.post(f"/staff/approvals/{approval}", data={**form, "typed_amount": "3.00"})
        assert r.status_code == 422 and "does not match" in r.text
        assert refunds_by_order(app_desk.db) == {}
        form["typed_amount"] = "30.00"
    r = other.post(f"/staff/approvals/{approval}", data=form)
    assert r.status_code == 200
    wait_for(lambda: "reply being checked" in other.get(f"/staff/tickets/{tid}").text)
    assert refunds_by_order(app_desk.db) == {"C-1042": 3000}
    assert "30.00 EUR" in other.get("/staff/ledger").text
    assert "No reply yet" in client.get(f"/my/tickets/{tid}").text
    page = other.get(f"/staff/tickets/{tid}").text
    r = other.post(
        f"/staff/tickets/{tid}/draft",
        data={
            "body": "Bonjour Marie, 30 EUR rembourses. Camille",
            "draft_version": hidden(page, "draft_version"),
            "csrftoken": staff_csrf,
        },
    )
    assert r.status_code == 200
    versions = {k: hidden(r.text, k) for k in ("ticket_version", "draft_version")}
    r = other.post(f"/staff/tickets/{tid}/send", data={**versions, "csrftoken": staff_csrf})
    assert r.status_code == 200
    assert "30 EUR rembourses. Camille" in client.get(f"/my/tickets/{tid}").text
    assert client.get(f"/api/tickets/{tid}").json()["reply"].endswith("Camille")
    # a second approval of the same proposal changes nothing
    r = other.post(f"/staff/approvals/{approval}", data=form)
    assert r.status_code == 409 and refunds_by_order(app_desk.db) == {"C-1042": 3000}


def test_the_live_trace_streams_as_server_sent_events(client: TestClient, app_desk: Desk) -> None:
    login(client, "staff")
    wait_for(lambda: "refund waiting" in client.get("/staff/inbox").text)
    page = client.get("/staff/tickets/1").text
    run_id = re.findall(r"run <code>([0-9a-f]{8})", page)[-1]
    full = re.search(rf'id="trace-({run_id}[0-9a-f]*)"', page).group(1)  # type: ignore[union-attr]
    with client.stream("GET", f"/staff/runs/{full}/events") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        body = "".join(r.iter_text())
    assert "event: trace" in body and "tool_finished" in body and "event: end" in body
    assert '"status": "awaiting_approval"' in body
