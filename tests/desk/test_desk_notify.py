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
import threading
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from desk_server import free_port
from helpers import pending_approval, staff_id, ticket, ticket_id_by_order
from sqlalchemy import select
from starlette.testclient import TestClient
from webclient import login, wait_for

from tether_desk.db import Database
from tether_desk.decisions import decide
from tether_desk.models import Notification
from tether_desk.notify import Outbox, PrintMailer, SmtpMailer, message_id, retry_delay
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


def rows(db: Database) -> list[Notification]:
    with db.read() as s:
        found = list(s.scalars(select(Notification).order_by(Notification.id)))
        for r in found:
            s.expunge(r)
        return found


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


async def test_an_unreachable_server_keeps_the_e_mail_for_a_later_attempt(
    desk: Desk, smtp: tuple[Inbox, SmtpMailer]
) -> None:
    inbox, mailer = smtp
    await _drafted_refund(desk)
    down = Outbox(desk.db, SmtpMailer("127.0.0.1", free_port(), timeout=2), retry_seconds=0.3)
    assert await down.deliver() == 0
    [row] = rows(desk.db)
    assert row.attempts == 1 and "Connection" in row.last_error and row.sent_at is None
    assert await Outbox(desk.db, mailer).deliver() == 0  # it waits its retry delay
    await asyncio.sleep(0.4)
    assert await Outbox(desk.db, mailer).deliver() == 1
    assert len(inbox.messages) == 1
    assert retry_delay(1) == 5 and retry_delay(4) == 40 and retry_delay(20) == 1_800


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


class Gate(Inbox):
    """An inbox whose server stops at a command (``RCPT``) until released, and which
    notes, at ``QUIT``, whether the outbox had already recorded the e-mail as sent."""

    def __init__(self, db: Database | None = None) -> None:
        super().__init__()
        self.db = db
        self.reached = threading.Event()
        self.release = threading.Event()
        self.hold_rcpt = False
        self.sent_before_quit: list[bool] = []

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, options: Any
    ) -> str:
        if self.hold_rcpt:
            self.reached.set()
            await asyncio.to_thread(self.release.wait)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_QUIT(self, server: Any, session: Any, envelope: Any) -> str:
        if self.db is not None:
            self.sent_before_quit.append(all(r.sent_at for r in rows(self.db)))
        return "221 Bye"


@pytest.fixture
def gate() -> Iterator[tuple[Gate, int]]:
    handler, port = Gate(), free_port()
    controller = Controller(handler, hostname="127.0.0.1", port=port)
    controller.start()
    yield handler, port
    handler.release.set()
    controller.stop()


DELIVER = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from tether_desk.db import Database
    from tether_desk.notify import Outbox, SmtpMailer

    class DiesOnAcceptance(SmtpMailer):
        def send(self, message, deadline):
            SmtpMailer.send(self, message, deadline)  # the server said 250
            os.kill(os.getpid(), signal.SIGKILL)  # before the outbox records it

    kind = DiesOnAcceptance if sys.argv[3] == "die" else SmtpMailer
    lease = float(sys.argv[4])
    mailer = kind("127.0.0.1", int(sys.argv[2]), timeout=lease / 4)
    asyncio.run(Outbox(Database(sys.argv[1]), mailer, lease=lease).deliver())
    """
)
LEASE = 6.0


def deliver_in_a_process(url: str, port: int, how: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", DELIVER, url, str(port), how, str(LEASE)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


async def test_a_kill_inside_the_exchange_before_the_server_accepted_sends_exactly_one(
    desk: Desk, gate: tuple[Gate, int]
) -> None:
    """Killed during the SMTP exchange, before the end of the data: nothing was accepted,
    the row stays claimed for its lease, then it is sent once."""
    server, port = gate
    await _drafted_refund(desk)  # one e-mail queued: staff, an approval waits
    server.hold_rcpt = True
    child = deliver_in_a_process(desk.db.url, port, "live")
    assert await asyncio.to_thread(server.reached.wait, 60), child.communicate()[0]
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL
    server.hold_rcpt = False
    server.release.set()
    restarted = Outbox(desk.db, SmtpMailer("127.0.0.1", port, timeout=1), lease=LEASE)
    assert await restarted.deliver() == 0  # the dead process's lease still runs
    await asyncio.sleep(LEASE + 0.2)
    assert await restarted.deliver() == 1
    assert await restarted.deliver() == 0
    assert len(server.messages) == 1
    [row] = rows(desk.db)
    assert row.sent_at is not None and row.attempts == 2


async def test_a_kill_after_the_server_accepted_resends_once_with_the_same_message_id(
    desk: Desk, gate: tuple[Gate, int]
) -> None:
    """The one window SMTP cannot close: the server accepted, the process died before it
    recorded so. After the lease the e-mail goes again, with the same Message-ID, once."""
    server, port = gate
    await _drafted_refund(desk)
    child = deliver_in_a_process(desk.db.url, port, "die")
    assert await asyncio.to_thread(child.wait, 60) == -signal.SIGKILL, child.communicate()[0]
    assert len(server.messages) == 1
    restarted = Outbox(desk.db, SmtpMailer("127.0.0.1", port, timeout=1), lease=LEASE)
    assert await restarted.deliver() == 0
    await asyncio.sleep(LEASE + 0.2)
    assert await restarted.deliver() == 1
    assert await restarted.deliver() == 0
    [row] = rows(desk.db)
    first, again = server.messages
    assert first["Message-ID"] == again["Message-ID"] == message_id(row.key)
    assert first.get_payload() == again.get_payload()


async def test_an_e_mail_is_recorded_sent_before_quit_and_never_handed_over_late(
    desk: Desk, gate: tuple[Gate, int]
) -> None:
    """The window is one local write: the row is marked sent as soon as the server
    accepted, before QUIT. And a process whose lease would run out before the server's
    answer does not send the end of the data (another may take the row over by then)."""
    server, port = gate
    server.db = desk.db
    await _drafted_refund(desk)
    short = Outbox(desk.db, SmtpMailer("127.0.0.1", port, timeout=1.0), lease=0.5)
    short.retry_seconds = 0.1
    assert await short.deliver() == 0
    [row] = rows(desk.db)
    assert "lease" in row.last_error and server.messages == []
    await asyncio.sleep(1.7)  # its retry delay, under the next outbox's lease
    fits = Outbox(desk.db, SmtpMailer("127.0.0.1", port, timeout=0.5), lease=2)
    fits.retry_seconds = 0.1
    assert await fits.deliver() == 1
    assert len(server.messages) == 1
    assert server.sent_before_quit[-1] is True
