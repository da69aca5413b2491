"""``tether worker`` processes on PostgreSQL: they share the queue, a dead worker's runs
finish on another started with ``--recover``, and an approval waits across a worker's
restart and is answered from the web console, in another process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from dbos import DBOSClient
from helpers import refunds_by_order, staff_id, ticket_id_by_order
from sqlalchemy import insert, select
from starlette.testclient import TestClient
from webclient import hidden, login, wait_for

from tether_desk.db import Database
from tether_desk.decisions import claim_decision, resume
from tether_desk.durable import DurableDesk, DurableSettings, system_database_url, workflow_id
from tether_desk.models import Approval, Customer, Order, Refund, RunEvent, Ticket
from tether_desk.money import format_cents
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.web.app import create_app

FINAL = {"draft_ready", "answered", "needs_human", "failed"}


class Worker:
    """``tether worker`` in a subprocess, its output in a file."""

    def __init__(self, url: str, worker_id: str, log: Path, *extra: str) -> None:
        self.log = log
        argv = [sys.executable, "-c", "from tether.cli import main; main()", "worker"]
        argv += ["--db", url, "--id", worker_id, "--poll", "0.05", *extra]
        out = open(log, "w")  # noqa: SIM115 (the process keeps it)
        self.process = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        wait_for(lambda: "taking tickets" in self.output() or self.process.poll() is not None, 60)
        assert self.process.poll() is None, self.output()

    def output(self) -> str:
        return self.log.read_text()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        """Ctrl-C: the worker stops cleanly."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            assert self.process.wait(timeout=60) == 0, self.output()
            assert "stopped." in self.output() and "--recover" in self.output()


@contextmanager
def workers(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(url: str, worker_id: str, *extra: str) -> Worker:
        w = Worker(url, worker_id, tmp_path / f"{worker_id}-{len(started)}.log", *extra)
        started.append(w)
        return w

    try:
        yield start
    finally:
        for w in started:
            if w.process.poll() is None:
                w.process.kill()
                w.process.wait()


def add_refund_tickets(db: Database, n: int) -> list[int]:
    """``n`` refund tickets, each on an order of its own (42.00 paid, 10.00 asked)."""
    ids = []
    with db.write() as s:
        customer = s.scalar(select(Customer.id).where(Customer.email.like("lea%")))
        for i in range(n):
            order = s.execute(
                insert(Order)
                .values(
                    number=f"C-{8000 + i:04d}",
                    customer_id=customer,
                    status="shipped",
                    amount_paid_cents=4200,
                    shipping_address="8 cours Mirabeau, 13100 Aix",
                    payment_method="card **** 1881",
                )
                .returning(Order.id)
            ).scalar_one()
            body = "Mon colis est arrive abime, je demande 10.00 EUR."
            ids.append(
                s.execute(
                    insert(Ticket)
                    .values(customer_id=customer, order_id=order, subject="Abime", body=body)
                    .returning(Ticket.id)
                ).scalar_one()
            )
    return ids


def statuses(db: Database, ids: list[int]) -> dict[int, str]:
    with db.read_connection() as c:
        rows = c.execute(select(Ticket.id, Ticket.status).where(Ticket.id.in_(ids)))
        return {int(i): str(s) for i, s in rows}


class Console:
    """The web console's side without a browser: its durable desk (no DBOS runtime)."""

    def __init__(self, db: Database) -> None:
        self.desk = Desk(db, DeskScriptedModel())
        self.runs = DurableDesk(self.desk, DurableSettings(), process=False)
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self.runs.start())
        self.staff = staff_id(db)

    def submit(self) -> int:
        return self.loop.run_until_complete(self.runs.submit_new())

    def approve_pending(self) -> int:
        with self.desk.db.read_connection() as c:
            waiting = c.execute(
                select(Approval.id, Approval.amount_cents).where(Approval.status == "pending")
            ).all()
        for aid, cents in waiting:
            typed = format_cents(cents)  # the screen may ask for the amount to be typed
            claimed = claim_decision(self.desk, aid, self.staff, approve=True, typed_amount=typed)
            self.loop.run_until_complete(resume(self.desk, claimed))
        return len(waiting)

    def close(self) -> None:
        self.loop.run_until_complete(self.runs.stop())
        self.loop.close()


@pytest.fixture
def console(pg_db: Database) -> Iterator[Console]:
    c = Console(pg_db)
    yield c
    c.close()


def executors(url: str, ids: list[int]) -> dict[str, str]:
    client = DBOSClient(system_database_url=system_database_url(url))
    try:
        found = client.list_workflows(workflow_ids=[workflow_id(t) for t in ids], load_input=False)
        return {w.workflow_id: str(w.executor_id) for w in found}
    finally:
        client.destroy()


def test_two_workers_share_the_queue(pg_db: Database, console: Console, tmp_path: Path) -> None:
    with workers(tmp_path) as start:
        one = start(pg_db.url, "w1", "--model", "scripted:0.2", "--concurrency", "4")
        two = start(pg_db.url, "w2", "--model", "scripted:0.2", "--concurrency", "4")
        ids = add_refund_tickets(pg_db, 24)  # once both take tickets
        console.submit()

        def settled() -> bool:
            console.approve_pending()
            return all(s in FINAL for s in statuses(pg_db, ids).values())

        wait_for(settled, 120)
        one.stop()
        two.stop()
    assert set(executors(pg_db.url, ids).values()) == {"w1", "w2"}
    with pg_db.read_connection() as c:
        keys = c.scalars(select(Refund.ticket_id).where(Refund.ticket_id.in_(ids))).all()
    assert sorted(keys) == sorted(ids)  # one refund per ticket, none twice


def test_a_dead_workers_runs_finish_on_another_worker(
    pg_db: Database, console: Console, tmp_path: Path
) -> None:
    ids = add_refund_tickets(pg_db, 12)
    with workers(tmp_path) as start:
        first = start(pg_db.url, "w1", "--model", "scripted:0.3", "--concurrency", "6")
        console.submit()
        wait_for(lambda: "triaging" in statuses(pg_db, ids).values(), 60)
        console.approve_pending()
        first.kill()  # runs in flight: triaging, waiting for approval, resuming
        held = [wid for wid, who in executors(pg_db.url, ids).items() if who == "w1"]
        client = DBOSClient(system_database_url=system_database_url(pg_db.url))
        pending = client.list_workflows(status="PENDING", executor_id="w1", load_input=False)
        client.destroy()
        assert pending  # the dead worker left runs in progress
        second = start(pg_db.url, "w2", "--model", "scripted", "--recover", "w1")
        assert "pending run(s) of w1" in second.output()

        def settled() -> bool:
            console.approve_pending()
            return all(s in FINAL for s in statuses(pg_db, ids).values())

        wait_for(settled, 120)
        second.stop()
    assert set(statuses(pg_db, ids).values()) == {"draft_ready"}
    after = executors(pg_db.url, ids)
    taken = {w.workflow_id for w in pending} & set(after)
    assert taken and {after[wid] for wid in taken} == {"w2"}
    assert held  # w1 had taken tickets before it died
    with pg_db.read_connection() as c:
        refunds = c.scalars(select(Refund.ticket_id).where(Refund.ticket_id.in_(ids))).all()
        approvals = c.scalars(select(Approval.ticket_id).where(Approval.ticket_id.in_(ids))).all()
    assert sorted(refunds) == sorted(ids) and sorted(approvals) == sorted(ids)


def test_an_approval_waits_across_a_restart_and_is_answered_from_the_console(
    pg_db: Database, tmp_path: Path
) -> None:
    desk = Desk(pg_db, DeskScriptedModel())
    DurableDesk(desk, DurableSettings(), process=False)  # the console runs no ticket itself
    ticket = ticket_id_by_order(pg_db, "C-2210")
    with (
        workers(tmp_path) as start,
        TestClient(create_app(desk), base_url="http://127.0.0.1", follow_redirects=True) as browser,
    ):
        worker = start(pg_db.url, "w1", "--model", "scripted")  # the console queued the tickets
        wait_for(lambda: statuses(pg_db, [ticket])[ticket] == "awaiting_approval", 60)
        worker.kill()
        csrf = login(browser, "staff")
        with pg_db.read_connection() as c:
            approval = c.scalar(select(Approval.id).where(Approval.ticket_id == ticket))
        page = browser.get(f"/staff/approvals/{approval}")
        assert "12.00" in page.text
        digest = hidden(page.text, "arguments_hash")
        form = {"decision": "approve", "arguments_hash": digest, "csrftoken": csrf}
        r = browser.post(f"/staff/approvals/{approval}", data=form)
        assert r.status_code == 200, r.text
        time.sleep(0.5)  # the console sent the decision; no worker is alive to apply it
        assert statuses(pg_db, [ticket])[ticket] == "awaiting_approval"
        assert refunds_by_order(pg_db) == {}
        worker = start(pg_db.url, "w1", "--model", "scripted")
        wait_for(lambda: statuses(pg_db, [ticket])[ticket] == "draft_ready", 60)
        worker.stop()
        page = browser.get(f"/staff/tickets/{ticket}")
        assert "rembourse 12.00 EUR" in page.text
    assert refunds_by_order(pg_db) == {"C-2210": 1200}
    with pg_db.read_connection() as c:
        by = c.scalar(select(Refund.approved_by))
        decisions = c.scalars(select(RunEvent.data).where(RunEvent.kind == "decision")).all()
    assert by == staff_id(pg_db) and [d["approved"] for d in decisions] == [True]
