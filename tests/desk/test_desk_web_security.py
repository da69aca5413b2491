"""The console's sessions, CSRF, throttling and headers over HTTP: what a copied cookie,
a tossed cookie, a guessing attacker or a flooding customer can do (nothing)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update
from starlette.testclient import TestClient
from webclient import ACCOUNTS, login, token

from tether_desk import accounts
from tether_desk.clock import utcnow
from tether_desk.models import Run, Ticket, WebSession
from tether_desk.pipeline import Desk
from tether_desk.web.app import create_app
from tether_desk.web.settings import WebSettings

BASE = "http://127.0.0.1"
TICKET = {"order": "C-1042", "subject": "Colis", "text": "Ou est mon colis ?"}


def browser(desk: Desk, settings: WebSettings | None = None, **kw: object) -> TestClient:
    app = create_app(desk, start_worker=False, settings=settings)
    return TestClient(app, base_url=BASE, follow_redirects=True, **kw)  # type: ignore[arg-type]


@pytest.fixture
def client(desk: Desk) -> Iterator[TestClient]:
    with browser(desk) as c:
        yield c


def tickets(desk: Desk) -> int:
    with desk.db.read() as s:
        return int(s.scalar(select(func.count(Ticket.id))) or 0)


def copy_cookies(source: TestClient, target: TestClient) -> None:
    for cookie in source.cookies.jar:
        target.cookies.jar.set_cookie(copy.copy(cookie))


def test_a_token_and_cookies_from_another_browser_are_refused(
    client: TestClient, desk: Desk
) -> None:
    """Cookie tossing: the attacker's own anonymous cookies and token, planted in the
    victim's browser beside its session, do not pass."""
    login(client, "marie")
    before = tickets(desk)
    with TestClient(client.app, base_url=BASE) as attacker:
        forged = token(attacker)  # an anonymous GET /login
        copy_cookies(attacker, client)  # every cookie the attacker got, into the victim's jar
    r = client.post("/my/tickets", data={**TICKET, "csrftoken": forged})
    assert r.status_code == 403 and "security token" in r.text
    r = client.post("/api/tickets", json=TICKET, headers={"x-csrftoken": forged})
    assert r.status_code == 403
    assert tickets(desk) == before


def test_the_api_needs_the_session_token(client: TestClient, desk: Desk) -> None:
    csrf = login(client, "marie")
    before = tickets(desk)
    assert client.post("/api/tickets", json=TICKET).status_code == 403
    r = client.post("/api/tickets", json=TICKET, headers={"x-csrftoken": csrf})
    assert r.status_code == 201 and tickets(desk) == before + 1


def test_a_post_from_another_origin_is_refused_even_with_the_token(
    client: TestClient, desk: Desk
) -> None:
    csrf = login(client, "marie")
    before = tickets(desk)
    other_port = {"origin": "http://127.0.0.1:8081"}
    r = client.post("/my/tickets", data={**TICKET, "csrftoken": csrf}, headers=other_port)
    assert r.status_code == 403 and "another site" in r.text
    same_site = {"sec-fetch-site": "same-site"}
    r = client.post("/my/tickets", data={**TICKET, "csrftoken": csrf}, headers=same_site)
    assert r.status_code == 403
    own = {"origin": BASE, "sec-fetch-site": "same-origin"}
    r = client.post("/my/tickets", data={**TICKET, "csrftoken": csrf}, headers=own)
    assert r.status_code == 200 and tickets(desk) == before + 1


def test_a_cookie_copied_before_logout_is_refused_after_it(client: TestClient) -> None:
    csrf = login(client, "staff")
    with TestClient(client.app, base_url=BASE, follow_redirects=False) as thief:
        copy_cookies(client, thief)
        assert thief.get("/staff/inbox").status_code == 200
        assert client.post("/logout", data={"csrftoken": csrf}).status_code == 200
        r = thief.get("/staff/inbox")
        assert r.status_code == 303 and r.headers["location"] == "/login"
        assert thief.get("/api/tickets").status_code == 401


def test_log_out_everywhere_ends_every_session_of_the_account(desk: Desk) -> None:
    with browser(desk) as one, browser(desk) as two, browser(desk) as marie:
        login(two, "staff")
        login(marie, "marie")
        csrf = login(one, "staff")
        assert two.get("/staff/inbox").status_code == 200
        r = one.post("/logout/everywhere", data={"csrftoken": csrf})
        assert r.status_code == 200 and r.url.path == "/login"
        assert two.get("/staff/inbox").url.path == "/login"
        assert marie.get("/my/tickets").status_code == 200  # another account: untouched


def test_sessions_end_when_idle_or_at_their_absolute_end(desk: Desk) -> None:
    """The rows changed behind the console's back (as another process would): with
    ``session_recheck`` 0 it reads them on every request."""
    client = browser(desk, WebSettings(session_recheck=timedelta(0)))
    login(client, "staff")
    assert client.get("/staff/inbox").url.path == "/staff/inbox"
    with desk.db.write() as s:
        s.execute(update(WebSession).values(last_seen_at=utcnow() - timedelta(hours=2)))
    assert client.get("/staff/inbox").url.path == "/login"
    login(client, "staff")
    with desk.db.write() as s:
        s.execute(update(WebSession).values(expires_at=utcnow() - timedelta(seconds=1)))
    assert client.get("/staff/inbox").url.path == "/login"


def test_login_starts_a_new_session_and_ends_the_old_one(client: TestClient) -> None:
    login(client, "marie")
    with TestClient(client.app, base_url=BASE, follow_redirects=False) as thief:
        copy_cookies(client, thief)  # a fixed or copied cookie from before the login
        login(client, "paul")
        assert thief.get("/my/tickets").status_code == 303
    assert "Paul" in client.get("/my/tickets").text


def test_cookies_secure_prefixed_and_hsts_behind_tls(desk: Desk) -> None:
    tls = WebSettings(secure_cookies=True, hsts_seconds=31_536_000)
    with TestClient(
        create_app(desk, start_worker=False, settings=tls), base_url="https://127.0.0.1"
    ) as c:
        csrf = token(c)
        email, password = ACCOUNTS["staff"]
        data = {"email": email, "password": password, "csrftoken": csrf}
        r = c.post("/login", data=data, follow_redirects=False)
        cookie = next(v for k, v in r.headers.multi_items() if k == "set-cookie")
        assert cookie.startswith("__Host-desk_session=")
        assert "secure" in cookie.lower() and "httponly" in cookie.lower()
        assert r.headers["strict-transport-security"].startswith("max-age=31536000")


def test_throttled_logins_say_so_and_do_no_hashing(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    verify = accounts._HASHER.verify

    def counted(password: str, hashed: str | bytes) -> bool:
        calls.append(1)
        return verify(password, hashed)

    monkeypatch.setattr(accounts._HASHER, "verify", counted)
    csrf = token(client)
    email, password = ACCOUNTS["marie"]
    for _ in range(5):
        r = client.post("/login", data={"email": email, "password": "x", "csrftoken": csrf})
        assert r.status_code == 401
    assert len(calls) == 5
    r = client.post("/login", data={"email": email, "password": password, "csrftoken": csrf})
    assert r.status_code == 429 and "Too many failed logins" in r.text
    assert int(r.headers["retry-after"]) > 0
    assert len(calls) == 5  # refused before any argon2 work
    assert client.get("/my/tickets", follow_redirects=False).status_code == 303


def test_one_address_is_throttled_across_accounts(desk: Desk) -> None:
    settings = WebSettings(login_address_failures=8)
    with browser(desk, settings) as c:
        csrf = token(c)
        for i in range(8):
            data = {"email": f"nobody{i}@x.example", "password": "x", "csrftoken": csrf}
            assert c.post("/login", data=data).status_code == 401
        email, password = ACCOUNTS["staff"]
        r = c.post("/login", data={"email": email, "password": password, "csrftoken": csrf})
        assert r.status_code == 429
    # another address (through a trusted proxy) is not locked
    proxied = WebSettings(login_address_failures=8, trusted_proxies=("testclient",))
    with browser(desk, proxied) as c:
        csrf = token(c)
        data = {"email": email, "password": password, "csrftoken": csrf}
        r = c.post("/login", data=data, headers={"x-forwarded-for": "203.0.113.9"})
        assert r.status_code == 200 and r.url.path == "/staff/inbox"


def test_a_customer_cannot_open_thirty_tickets_in_two_seconds(desk: Desk) -> None:
    with desk.db.write() as s:  # the seeded tickets are from yesterday
        s.execute(update(Ticket).values(created_at=utcnow() - timedelta(days=1)))
    with browser(desk) as c:
        csrf = login(c, "marie")
        before = tickets(desk)
        codes = [
            c.post("/my/tickets", data={**TICKET, "csrftoken": csrf}).status_code for _ in range(30)
        ]
        r = c.post("/api/tickets", json=TICKET, headers={"x-csrftoken": csrf})
        assert r.status_code == 429 and "Wait a few minutes" in r.json()["detail"]
    assert codes.count(200) == 5 and codes.count(429) == 25
    assert tickets(desk) == before + 5
    with TestClient(create_app(desk), base_url=BASE) as running:  # the worker drains them
        assert running.portal is not None
        running.portal.call(running.app.state.worker.idle)  # type: ignore[attr-defined]
    with desk.db.read() as s:
        ran_on = s.scalar(
            select(func.count(func.distinct(Run.ticket_id))).where(Run.ticket_id > before)
        )
    assert ran_on == 5  # the agent ran on the accepted tickets only


@pytest.mark.parametrize(
    ("path", "kwargs", "status"),
    [
        ("/my/tickets", {"content": b"x" * 10, "headers": {"content-type": "text/plain"}}, 415),
        (
            "/my/tickets",
            {
                "content": b"a=" + b"x" * 100_000,
                "headers": {"content-type": "application/x-www-form-urlencoded"},
            },
            413,
        ),
        ("/my/tickets", {"data": {"csrftoken": "nope"}}, 403),
    ],
)
def test_security_headers_on_refusals(
    client: TestClient, path: str, kwargs: dict[str, object], status: int
) -> None:
    r = client.post(path, **kwargs)  # type: ignore[arg-type]
    assert r.status_code == status
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["cache-control"] == "no-store"


def test_errors_and_logged_in_pages_are_not_cached(client: TestClient) -> None:
    login(client, "staff")
    for path, status in (("/staff/inbox", 200), ("/nowhere", 404), ("/staff/tickets/999", 404)):
        r = client.get(path)
        assert r.status_code == status
        assert r.headers["cache-control"] == "no-store", path
        assert r.headers["x-frame-options"] == "DENY", path
    assert "no-store" not in client.get("/static/desk.css").headers.get("cache-control", "")
