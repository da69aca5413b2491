"""The helpdesk in Debian's Chromium against ``tether serve`` (durable, its default): a
customer answers the reply and reopens the ticket; the agent runs again on the thread and
its proposal cites the new message on the approval screen; the customer writes again while
it waits and the approval screen shows it; staff add a note the customer never sees;
assignment and search from the inbox; a saved reply fills the order's facts.

``DESK_SCREENSHOTS=DIR`` saves a screenshot of each step there (docs/screenshots).
"""

from __future__ import annotations

import re

from browsing import log_in, shot
from desk_server import Served
from helpers import refunds_by_order
from playwright.sync_api import Browser, Page, expect

from tether_desk.db import Database

DESK_MODEL = "scripted:0.1"


def wait_status(page: Page, words: str) -> None:
    for _ in range(80):
        if words in page.locator("#ticket-status").inner_text():
            return
        page.wait_for_timeout(400)
        page.reload()
    expect(page.locator("#ticket-status")).to_have_text(words)


def test_reply_reopen_rerun_note_assign_search_saved_reply(
    browser: Browser, desk_server: tuple[Served, Database]
) -> None:
    served, db = desk_server
    url = served.url
    staff = log_in(browser, url, "camille@desk.example", "camille-demo")
    customer = log_in(browser, url, "marie.dupont@client.example", "marie-demo")

    customer.goto(f"{url}/my/tickets/new")
    customer.select_option("select[name=order]", "C-1042")
    customer.fill("input[name=subject]", "Vase casse")
    customer.fill("textarea[name=text]", "Le vase est arrive casse, je demande 30 EUR.")
    customer.click("main form button[type=submit]")
    customer.wait_for_url(re.compile(r"/my/tickets/\d+$"))
    tid = int(customer.url.rsplit("/", 1)[1])

    # first round: approve 30.00, send the agent's draft
    staff.goto(f"{url}/staff/tickets/{tid}")
    wait_status(staff, "refund waiting for approval")
    staff.click("text=Review and decide")
    expect(staff.locator("#amount")).to_have_text("30.00 EUR")
    staff.click("#approve")
    staff.wait_for_url(re.compile(rf"/staff/tickets/{tid}$"))
    wait_status(staff, "reply being checked")
    staff.click("#send")
    wait_status(staff, "answered")

    # the customer reads the answer in the conversation, answers it and reopens
    customer.goto(f"{url}/my/tickets/{tid}")
    thread = customer.locator("#thread li")
    expect(customer.locator("#thread li.msg-staff")).to_contain_text("rembourse 30.00 EUR")
    expect(customer.locator("#thread li.msg-system")).to_contain_text(
        "Refund of 30.00 EUR approved by Camille"
    )
    customer.fill("#reply-text", "Merci. Il manque aussi la notice : 12 EUR de plus svp.")
    shot(customer, "customer-reply-reopen")
    customer.click("#send-reply")
    expect(thread.last).to_contain_text("The customer reopened the ticket.")
    new_message = customer.locator("#thread li.msg-customer").last
    expect(new_message).to_contain_text("notice")
    message_id = new_message.get_attribute("id")
    assert message_id and message_id.startswith("message-")
    number = message_id.split("-", 1)[1]

    # the agent ran again on the thread: its proposal cites the new message
    staff.goto(f"{url}/staff/tickets/{tid}")
    wait_status(staff, "refund waiting for approval")
    staff.click("text=Review and decide")
    expect(staff.locator("#amount")).to_have_text("12.00 EUR")
    expect(staff.locator("table.origins tr.risky").first).to_contain_text(
        f"the customer's message #{number}"
    )
    shot(staff, "staff-approval-cites-message")

    # the customer writes again while that refund waits: nothing is interrupted, the
    # approval screen shows what the proposal did not read
    customer.goto(f"{url}/my/tickets/{tid}")
    customer.fill("#reply-text", "Precision : c'etait dans le carton du bas.")
    customer.click("#send-reply")
    expect(customer.locator("#thread li.msg-customer").last).to_contain_text("carton du bas")
    expect(customer.locator("#thread")).not_to_contain_text("runs again")
    staff.reload()
    expect(staff.locator("#wrote-since")).to_contain_text("carton du bas")
    expect(staff.locator("#amount")).to_have_text("12.00 EUR")
    shot(staff, "staff-approval-wrote-since")

    # an internal note the customer never sees
    staff.goto(f"{url}/staff/tickets/{tid}")
    staff.fill("#note-text", "Cliente fidele : verifier le stock de notices.")
    staff.click("#add-note")
    expect(staff.locator("#thread li.msg-note")).to_contain_text("stock de notices")
    customer.reload()
    expect(customer.locator("#thread")).to_contain_text("notice : 12 EUR")
    expect(customer.locator("#thread")).not_to_contain_text("stock de notices")
    expect(customer.locator("#thread li.msg-note")).to_have_count(0)
    expect(customer.locator("#thread li.msg-agent")).to_have_count(0)

    # a saved reply filled from the order's facts
    staff.select_option("#saved-reply", label="Refund made")
    staff.click("#use-saved-reply")
    expect(staff.locator("textarea[name=body]")).to_have_value(
        re.compile(
            r"Bonjour Marie Dupont, nous avons rembourse 30\.00 EUR .* C-1042 \(payee 89\.90"
        )
    )
    shot(staff, "staff-thread-note-saved-reply")

    # assignment and search from the inbox
    staff.select_option("#assignee", label="Camille (support) (me)")
    staff.click("#assign")
    staff.goto(f"{url}/staff/inbox")
    staff.click("text=assigned to me")
    expect(staff.locator("#inbox tbody tr")).to_have_count(1)
    expect(staff.locator("#inbox tbody tr")).to_contain_text("Vase casse")
    shot(staff, "staff-inbox-assigned")
    staff.fill("#search", "notices")
    staff.press("#search", "Enter")
    expect(staff.locator("#search-results tbody tr")).to_have_count(1)
    expect(staff.locator("#search-results")).to_contain_text("Vase casse")
    shot(staff, "staff-search")
    assert refunds_by_order(db) == {"C-1042": 3000}
