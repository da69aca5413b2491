"""``tether serve --workers N`` hands its mailer to the worker processes: with ``--smtp``
the notifications reach a local SMTP server (aiosmtpd on 127.0.0.1, a free port), with
``--print-mail`` they are printed; each e-mail once, though every worker runs an outbox."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from desk_server import free_port, serve
from test_desk_cli import wait_until
from test_desk_notify import Inbox


@pytest.fixture
def smtp_server() -> Iterator[tuple[Inbox, int]]:
    inbox, port = Inbox(), free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, port
    controller.stop()


def notifications(db: str) -> list[tuple[str, str | None]]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT to_addr, sent_at FROM notifications ORDER BY id").fetchall()


def test_plain_worker_processes_send_through_the_smtp_server(
    tmp_path: Path, smtp_server: tuple[Inbox, int]
) -> None:
    inbox, port = smtp_server
    db = str(tmp_path / "desk.db")
    args = ("--workers", "2", "--plain", "--smtp", f"127.0.0.1:{port}")
    with serve(db, args=args) as served:
        # C-1187 is answered by the desk's code (the customer hears of it); refunds wait
        # for approval (every staff member hears of each)
        wait_until(lambda: bool(inbox.to("marie.dupont@client.example")), "no reply e-mail")
        wait_until(lambda: bool(inbox.to("camille@desk.example")), "no approval e-mail")
        queued = notifications(db)
        wait_until(lambda: all(sent for _, sent in notifications(db)), "e-mails left unsent")
    assert served.process.returncode == 0, served.output
    assert queued and len(inbox.messages) == len(notifications(db))  # each sent once
    ids = [m["Message-ID"] for m in inbox.messages]
    assert len(set(ids)) == len(ids)
    [reply] = inbox.to("marie.dupont@client.example")
    assert "votre commande C-1187" in reply.get_payload()


def test_durable_console_processes_print_the_e_mails(tmp_path: Path) -> None:
    db = str(tmp_path / "desk.db")
    with serve(db, args=("--workers", "2", "--print-mail")) as served:
        wait_until(lambda: len(notifications(db)) >= 2, "nothing was queued")
        wait_until(lambda: all(sent for _, sent in notifications(db)), "e-mails left unsent")
    assert served.process.returncode == 0, served.output
    printed = [line for line in served.output.splitlines() if line.startswith("--- e-mail to")]
    assert "--- e-mail to marie.dupont@client.example: Re: Ou en est ma commande ?" in printed
    assert len(printed) == len(notifications(db))  # each printed once, by one worker
