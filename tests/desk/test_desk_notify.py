"""Notifications by e-mail through the outbox, received by a local SMTP server (aiosmtpd)
on 127.0.0.1: the customer on a reply, staff on an approval waiting; each sent once, also
when the process is killed between the reply and its e-mail."""

from __future__ import annotations

import asyncio
import io
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from desk_server import free_port
from helpers import pending_approval, staff_id, ticket, ticket_id_by_order
from starlette.testclient import TestClient
from webclient import login, wait_for

from tether_desk.db import Database
from tether_desk.decisions import decide
from tether_desk.notify import Outbox, PrintMailer, SmtpMailer
from tether_desk.pipeline import Desk, process_ticket
from tether_desk.tickets import send_reply
from tether_desk.web.app import create_app


class Inbox:
    """An aiosmtpd handler keeping every message it receives."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"

    def to(self, address: str) -> list[Message]:
        return [m for m in self.messages if m["To"] == address]


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, SmtpMailer]]:
    inbox, port = Inbox(), free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, SmtpMailer("127.0.0.1", port)
    controller.stop()


async def _drafted_refund(desk: Desk) -> int:
    tid = ticket_id_by_order(desk.db, "C-2210")
    await process_ticket(desk, tid)
    approval = pending_approval(desk.db, tid)
    assert approval is not None
    await decide(desk, approval.id, staff_id(desk.db), approve=True)
    return tid


async def test_staff_hear_of_an_approval_and_the_customer_of_the_reply_once(
    desk: Desk, smtp: tuple[Inbox, SmtpMailer]
) -> None:
    inbox, mailer = smtp
    outbox = Outbox(desk.db, mailer)
    tid = await _drafted_refund(desk)
    assert await outbox.deliver() == 1
    [staff_mail] = inbox.to("camille@desk.example")
    assert staff_mail["Subject"] == "Refund of 12.00 EUR waits for approval (order C-2210)"
    send_reply(desk.db, tid, staff_id(desk.db))
    assert await outbox.deliver() == 1
    assert await outbox.deliver() == 0  # nothing sent twice
    [reply] = inbox.to("paul.martin@client.example")
    assert reply["Subject"] == "Re: Article manquant"
    assert "rembourse 12.00 EUR" in reply.get_payload()
    assert reply["Message-ID"].startswith("<reply.")
    assert len(inbox.messages) == 2


async def test_an_unreachable_server_keeps_the_e_mail_for_later(
    desk: Desk, smtp: tuple[Inbox, SmtpMailer]
) -> None:
    inbox, mailer = smtp
    await _drafted_refund(desk)
    down = Outbox(desk.db, SmtpMailer("127.0.0.1", free_port(), timeout=2))
    assert await down.deliver() == 0
    assert await Outbox(desk.db, mailer).deliver() == 1
    assert len(inbox.messages) == 1


def test_the_console_sends_the_reply_through_smtp(
    desk: Desk, smtp: tuple[Inbox, SmtpMailer]
) -> None:
    inbox, mailer = smtp
    desk.mailer = mailer
    tid = ticket_id_by_order(desk.db, "C-1187")  # tracking: answered by the desk's code
    with TestClient(create_app(desk), base_url="http://127.0.0.1") as client:
        login(client, "staff")
        wait_for(lambda: ticket(desk.db, tid).status == "answered")
        wait_for(lambda: bool(inbox.to("marie.dupont@client.example")), seconds=30)
    [mail] = inbox.to("marie.dupont@client.example")
    assert "votre commande C-1187" in mail.get_payload()


async def test_print_mailer_prints_instead_of_sending(desk: Desk) -> None:
    out = io.StringIO()
    await _drafted_refund(desk)
    assert await Outbox(desk.db, PrintMailer(out)).deliver() == 1
    assert "--- e-mail to camille@desk.example: Refund of 12.00 EUR" in out.getvalue()


KILLED_AFTER_REPLY = textwrap.dedent(
    """
    import os, signal, sys
    from tether_desk.db import Database
    from tether_desk.tickets import send_reply
    db = Database(sys.argv[1])
    send_reply(db, int(sys.argv[2]), int(sys.argv[3]))  # the reply and its e-mail, committed
    os.kill(os.getpid(), signal.SIGKILL)  # before the outbox runs
    """
)


async def test_a_kill_between_the_reply_and_its_e_mail_sends_exactly_one(
    tmp_path: Path, desk: Desk, smtp: tuple[Inbox, SmtpMailer]
) -> None:
    inbox, mailer = smtp
    tid = await _drafted_refund(desk)
    await Outbox(desk.db, mailer).deliver()  # staff's approval e-mail
    url = desk.db.url
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", KILLED_AFTER_REPLY, url, str(tid), str(staff_id(desk.db))],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert ticket(desk.db, tid).status == "answered"
    assert inbox.to("paul.martin@client.example") == []
    restarted = Database(url)  # the next start: its outbox sends what was queued
    try:
        assert await Outbox(restarted, mailer).deliver() == 1
        assert await Outbox(restarted, mailer).deliver() == 0
    finally:
        restarted.dispose()
    assert len(inbox.to("paul.martin@client.example")) == 1
