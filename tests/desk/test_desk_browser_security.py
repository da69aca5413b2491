"""Browser tests of the console's defences, in Debian's Chromium against ``tether serve``:

1. Cookie tossing: a page on another port of 127.0.0.1 plants its own cookies and posts
   every state-changing form with a token it fetched itself; each post is refused.
2. A cookie copied before logout is refused after it.
3. Logins are throttled after N failures, with a sentence saying so.
4. The reopen race: staff sends a reply while the refund agent still runs; the agent's
   proposal is dropped and the reply stands.
5. The overwrite race: a draft staff saved while a refund waited survives the agent's
   draft; a colleague's screen from before gets a page saying what changed.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
import urllib.request

import pytest
from browsing import VIEWPORT
from desk_server import Served, free_port
from helpers import pending_approval, refunds_by_order, ticket, ticket_id_by_order
from playwright.sync_api import Browser, BrowserContext, Page, expect
from sqlalchemy import func, select

from tether_desk.db import Database
from tether_desk.models import Ticket, WebSession
from tether_desk.tickets import draft_of

STAFF = ("camille@desk.example", "camille-demo")
MARIE = ("marie.dupont@client.example", "marie-demo")
NO_TRACEBACK = True


def context(browser: Browser) -> BrowserContext:
    return browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]


def log_in(page: Page, url: str, account: tuple[str, str]) -> None:
    page.goto(f"{url}/login")
    page.fill("input[name=email]", account[0])
    page.fill("input[name=password]", account[1])
    page.click("main form button[type=submit]")
    expect(page.locator("header .who")).to_be_visible()


def wait_until(page: Page, check: object, seconds: float = 40) -> None:
    for _ in range(int(seconds * 4)):
        if check():  # type: ignore[operator]
            return
        page.wait_for_timeout(250)
    raise AssertionError("condition not met in time")


# --- 1. cookie tossing ------------------------------------------------------------------


def attacker_cookies_and_token(url: str) -> tuple[dict[str, str], str]:
    """What an attacker gets from its own anonymous visit: cookies and a valid token."""
    with urllib.request.urlopen(f"{url}/login") as r:
        html = r.read().decode()
        cookies = dict(
            c.split(";", 1)[0].split("=", 1) for c in r.headers.get_all("set-cookie") or []
        )
    token = re.search(r'name="csrftoken" value="([^"]+)"', html)
    assert token is not None
    return cookies, token.group(1)


class TossingSite:
    """A page on another port of 127.0.0.1 that plants cookies, then posts a form."""

    def __init__(self) -> None:
        self.page = b""
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(site.page)))
                self.end_headers()
                self.wfile.write(site.page)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def arm(self, action: str, fields: dict[str, str], cookies: dict[str, str]) -> None:
        inputs = "".join(f'<input name="{k}" value="{v}">' for k, v in fields.items())
        plant = "".join(
            f"document.cookie = {json.dumps(f'{k}={v}; path=/')};" for k, v in cookies.items()
        )
        self.page = (
            f'<html><body><form id="f" method="post" action="{action}">{inputs}</form>'
            f'<script>{plant} document.getElementById("f").submit()</script></body></html>'
        ).encode()


def tossed_post(page: Page, site: TossingSite, url: str, path: str, fields: dict[str, str]) -> None:
    cookies, token = attacker_cookies_and_token(url)
    cookies["csrftoken"] = token  # the double-submit cookie a token-only check would trust
    site.arm(f"{url}{path}", {**fields, "csrftoken": token}, cookies)
    with page.expect_response(f"{url}{path}") as posted:
        page.goto(site.url)
    assert posted.value.status == 403, path
    page.wait_for_timeout(100)


def count(db: Database, model: type, *where: object) -> int:
    with db.read() as s:
        return int(s.scalar(select(func.count()).select_from(model).where(*where)) or 0)  # type: ignore[arg-type]


def test_cookie_tossing_from_another_port_fails_on_every_form(
    browser: Browser, desk_server: tuple[Served, Database]
) -> None:
    served, db = desk_server
    url = served.url
    site = TossingSite()
    try:
        # the login form: an anonymous visitor is not logged in as the attacker
        visitor = context(browser).new_page()
        visitor.goto(f"{url}/login")
        email, password = MARIE
        tossed_post(visitor, site, url, "/login", {"email": email, "password": password})
        visitor.goto(f"{url}/my/tickets")
        expect(visitor).to_have_url(f"{url}/login")

        customer = context(browser).new_page()
        log_in(customer, url, MARIE)
        tickets = count(db, Ticket)
        fields = {"order": "C-1042", "subject": "forged", "text": "forged by another site"}
        tossed_post(customer, site, url, "/my/tickets", fields)
        assert count(db, Ticket) == tickets
        for path in ("/logout", "/logout/everywhere"):
            tossed_post(customer, site, url, path, {})
            customer.goto(f"{url}/my/tickets")
            expect(customer).to_have_url(f"{url}/my/tickets")  # still logged in

        staff = context(browser).new_page()
        log_in(staff, url, STAFF)
        tid = ticket_id_by_order(db, "C-2210")
        wait_until(staff, lambda: pending_approval(db, tid) is not None)
        approval = pending_approval(db, tid)
        assert approval is not None
        fields = {
            "decision": "approve",
            "arguments_hash": approval.arguments_hash,
            "typed_amount": "12.00",
        }
        tossed_post(staff, site, url, f"/staff/approvals/{approval.id}", fields)
        tossed_post(
            staff,
            site,
            url,
            f"/staff/tickets/{tid}/draft",
            {"body": "forged", "draft_version": "0"},
        )
        tossed_post(
            staff,
            site,
            url,
            f"/staff/tickets/{tid}/send",
            {"ticket_version": "99", "draft_version": "1"},
        )
        assert pending_approval(db, tid) is not None and refunds_by_order(db) == {}
        assert draft_of(db, tid) is None and ticket(db, tid).reply is None
        staff.goto(f"{url}/staff/inbox")
        expect(staff).to_have_url(f"{url}/staff/inbox")
    finally:
        site.server.shutdown()


# --- 2. logout ends the session ---------------------------------------------------------


def test_a_cookie_copied_before_logout_is_refused_after_it(
    browser: Browser, desk_server: tuple[Served, Database]
) -> None:
    served, db = desk_server
    url = served.url
    owner = context(browser)
    page = owner.new_page()
    log_in(page, url, STAFF)
    thief = context(browser)
    thief.add_cookies(owner.cookies())  # copied before logout
    stolen = thief.new_page()
    stolen.goto(f"{url}/staff/inbox")
    expect(stolen).to_have_url(f"{url}/staff/inbox")
    page.click("header form.logout button:not(#logout-everywhere)")
    expect(page).to_have_url(f"{url}/login")
    assert count(db, WebSession) == 0
    stolen.goto(f"{url}/staff/inbox")
    expect(stolen).to_have_url(f"{url}/login")


# --- 3. throttling ----------------------------------------------------------------------


def test_logins_are_throttled_after_five_failures(
    browser: Browser, desk_server: tuple[Served, Database]
) -> None:
    served, _ = desk_server
    page = context(browser).new_page()
    page.goto(f"{served.url}/login")
    for _ in range(5):
        page.fill("input[name=email]", STAFF[0])
        page.fill("input[name=password]", "guess")
        page.click("main form button[type=submit]")
        expect(page.locator(".error")).to_contain_text("Wrong e-mail or password")
    page.fill("input[name=email]", STAFF[0])
    page.fill("input[name=password]", STAFF[1])  # the right one, too late
    with page.expect_response(f"{served.url}/login") as answered:
        page.click("main form button[type=submit]")
    assert answered.value.status == 429
    expect(page.locator(".error")).to_contain_text("Too many failed logins")
    expect(page.locator("header .who")).to_have_count(0)


# --- 4 and 5. the races -----------------------------------------------------------------


@pytest.mark.parametrize("desk_server", ["scripted:2.5"], indirect=True)
def test_a_reply_sent_while_the_agent_runs_stands(
    browser: Browser, desk_server: tuple[Served, Database]
) -> None:
    served, db = desk_server
    url = served.url
    customer = context(browser).new_page()
    log_in(customer, url, MARIE)
    customer.goto(f"{url}/my/tickets/new")
    customer.select_option("select[name=order]", "C-1042")
    customer.fill("input[name=subject]", "Colis casse")
    customer.fill("textarea[name=text]", "Le colis est arrive casse, remboursez 30 EUR svp.")
    customer.click("main form button[type=submit]")
    customer.wait_for_url(re.compile(r"/my/tickets/\d+$"))
    tid = int(customer.url.rsplit("/", 1)[1])

    staff = context(browser).new_page()
    log_in(staff, url, STAFF)
    staff.goto(f"{url}/staff/tickets/{tid}")
    staff.fill("textarea[name=body]", "Bonjour Marie, nous ne pouvons pas rembourser. Camille")
    staff.click("text=Save draft")
    staff.click("#send")
    expect(staff.locator("pre.reply")).to_contain_text("nous ne pouvons pas rembourser")
    assert ticket(db, tid).status == "answered"

    def agent_done() -> bool:
        with db.read() as s:
            from tether_desk.models import Run

            runs = s.scalars(select(Run.status).where(Run.ticket_id == tid)).all()
        return len(runs) == 2 and "running" not in runs

    wait_until(staff, agent_done, 60)
    staff.reload()
    expect(staff.locator("#ticket-status")).to_have_text("answered")
    expect(staff.locator("pre.reply")).to_contain_text("nous ne pouvons pas rembourser")
    expect(staff.locator("li.ev-dropped_by_desk")).to_contain_text("staff answered the ticket")
    expect(staff.locator("text=Review and decide")).to_have_count(0)
    assert pending_approval(db, tid) is None and refunds_by_order(db) == {}
    customer.goto(f"{url}/my/tickets/{tid}")
    expect(customer.locator("#reply")).to_contain_text("nous ne pouvons pas rembourser")


def test_a_saved_draft_survives_the_agent_and_a_stale_screen_is_told(
    browser: Browser, desk_server: tuple[Served, Database]
) -> None:
    served, db = desk_server
    url = served.url
    tid = ticket_id_by_order(db, "C-2210")
    one = context(browser).new_page()
    log_in(one, url, STAFF)
    wait_until(one, lambda: pending_approval(db, tid) is not None)
    one.goto(f"{url}/staff/tickets/{tid}")
    mine = "Bonjour Paul, votre remboursement est en cours. Camille"
    one.fill("textarea[name=body]", mine)
    one.click("text=Save draft")
    expect(one.locator("#draft")).to_contain_text("Draft by staff")

    two = context(browser).new_page()  # a colleague's screen, from before the refund
    log_in(two, url, STAFF)
    two.goto(f"{url}/staff/tickets/{tid}")

    one.click("text=Review and decide")
    one.click("#approve")
    one.wait_for_url(re.compile(rf"/staff/tickets/{tid}$"))
    wait_until(one, lambda: ticket(db, tid).status == "draft_ready", 60)
    one.reload()
    expect(one.locator("textarea[name=body]")).to_have_value(mine)
    expect(one.locator("#agent-suggestion")).to_contain_text("12.00 EUR")

    two.click("#send")  # the ticket changed since this screen: nothing is sent
    expect(two.locator("#stale")).to_contain_text("This changed while you were looking")
    expect(two.locator("#stale .changes")).to_contain_text("draft ready")
    expect(two.locator("#current-text")).to_contain_text(mine)
    assert ticket(db, tid).reply is None

    one.click("#send")
    expect(one.locator("pre.reply")).to_contain_text(mine)
    assert ticket(db, tid).reply == mine and refunds_by_order(db) == {"C-2210": 1200}
