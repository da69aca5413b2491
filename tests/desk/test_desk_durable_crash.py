"""Crash injection on the durable desk: the worker SIGKILLed at every step boundary of a
ticket's flow, on SQLite and on PostgreSQL (``durable_harness``).

The boundaries: before and after each step of a ticket (``desk.triage``: the claim, the
model call and its record, then the answer, the hand-off to a person, or the refund
agent's turns up to its proposal, the desk's screening and the approval stored;
``desk.finish``: the decision read, the refund, the last model call, the draft) and
every point inside them
(each model call, the tools, the screening, the approval, the draft), while the refund waits (the
decision then comes from the web console's side while no worker is alive), after the
decision is received, and after each workflow's last step. "After step X is logged" is
not listed apart: it is "before" the next step, with nothing durable in between.
Afterwards every run completed, no refund was made twice, no approval was lost, the
ledger never exceeds what was paid, and nothing ran again once its step was logged: only
the step the worker died in ran again, up to where it died.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from dbos import DBOSClient
from durable_harness import WAITING, Crash, crash_everywhere
from sqlalchemy import func, select

from postgres_server import PostgresServer
from tether_desk.db import Database, sqlite_url
from tether_desk.durable import system_database_url, workflow_id
from tether_desk.models import Approval, Draft, Refund, Run, RunEvent, Ticket

REFUND_POINTS = [
    "triage.before",
    "triage.returned",
    "model.before:1",
    "model.returned:1",
    "tool.before:1:read_ticket",
    "tool.returned:1:read_order",
    "model.before:2",
    "model.returned:2",
    "screen.before",
    "approval.requested",
    "approval.returned",
    WAITING,
    "approval.received",
    "finish.before",
    "tool.before:2:propose_refund",
    "tool.returned:2:propose_refund",
    "model.before:3",
    "model.returned:3",
    "draft.before",
    "draft.returned",
    "finish.returned",
    "ticket.done",
    "finish.done",
]
BETWEEN = {"approval.received", "ticket.done", "finish.done"}
"""The boundaries between two steps; every other one is inside the step its workflow runs
at that moment."""


@pytest.fixture(scope="module")
def crashes(
    tmp_path_factory: pytest.TempPathFactory, pg_server: PostgresServer
) -> Iterator[dict[str, tuple[Crash, str]]]:
    """Both scenarios, run at the same time (two workers, two databases)."""
    lite = tmp_path_factory.mktemp("crash-sqlite")
    pg = tmp_path_factory.mktemp("crash-postgres")
    pg_url = pg_server.create_database("desk_crash")
    urls = {"sqlite": sqlite_url(lite / "desk.db"), "postgresql": pg_url}

    async def both() -> list[Crash]:
        return await asyncio.gather(
            crash_everywhere(urls["sqlite"], lite, REFUND_POINTS),
            crash_everywhere(urls["postgresql"], pg, REFUND_POINTS),
        )

    lite_crash, pg_crash = asyncio.run(both())
    yield {"sqlite": (lite_crash, urls["sqlite"]), "postgresql": (pg_crash, urls["postgresql"])}
    pg_server.drop_database(pg_url)


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_worker_killed_at_every_boundary_loses_nothing(
    crashes: dict[str, tuple[Crash, str]], dialect: str
) -> None:
    crash, url = crashes[dialect]
    assert crash.kills == 1 and crash.starts == 2
    marks = {int(m.name): m.read_text() for m in (crash.workdir / "marks").iterdir()}
    assert marks == {t: p for t, p in crash.points.items() if p != WAITING}
    waiting = next(t for t, p in crash.points.items() if p == WAITING)
    assert crash.approved_while_dead == [waiting]
    db = Database(url)
    try:
        check_outcomes(db, crash)
        check_steps_ran_once(url, crash, crash.workdir / "boundaries.sqlite")
    finally:
        db.dispose()


def check_outcomes(db: Database, crash: Crash) -> None:
    refunds = [t for t, k in crash.kinds.items() if k in ("refund", "shared")]
    with db.read() as s:
        status = {t: st for t, st in s.execute(select(Ticket.id, Ticket.status))}
        ledger = s.execute(select(Refund.ticket_id, Refund.amount_cents, Refund.approved_by)).all()
        approvals = s.execute(
            select(Approval.ticket_id, Approval.status, Approval.decided_by)
        ).all()
        drafts = {t: b for t, b in s.execute(select(Draft.ticket_id, Draft.body))}
        per_order = {
            o: int(n)
            for o, n in s.execute(
                select(Refund.order_id, func.sum(Refund.amount_cents)).group_by(Refund.order_id)
            )
        }
        runs = s.execute(select(Run.ticket_id, Run.kind, Run.status, Run.id)).all()
        events = Counter(
            (run_id, kind) for run_id, kind in s.execute(select(RunEvent.run_id, RunEvent.kind))
        )
    for t, kind in crash.kinds.items():
        expected = {"tracking": "answered", "other": "needs_human"}.get(kind, "draft_ready")
        assert status[t] == expected, (t, crash.points[t], status[t])
    # no approval lost, none twice: one per refund ticket, decided by the staff member;
    # the second on the shared order was refused before approval (the ledger could not pay)
    loser = next(t for t, k in crash.kinds.items() if k == "shared" and t != shared_winner(crash))
    assert sorted(a.ticket_id for a in approvals) == sorted(refunds)
    assert {(a.ticket_id, a.status) for a in approvals if a.status != "approved"} == {
        (loser, "denied")
    }
    assert {a.decided_by for a in approvals} == {crash.staff}
    # no refund twice; the one that came second on the shared order was refused
    assert Counter(r.ticket_id for r in ledger) == Counter(
        [t for t in refunds if crash.kinds[t] == "refund"] + [shared_winner(crash)]
    )
    assert all(r.approved_by == crash.staff for r in ledger)
    assert all(r.amount_cents == 2000 for r in ledger if crash.kinds[r.ticket_id] == "refund")
    assert all(total <= 5000 for total in per_order.values())  # never more than was paid
    assert per_order[crash.shared_order] == 3000
    assert "rembourse 30.00 EUR" in drafts[shared_winner(crash)]
    assert "Un conseiller" in drafts[loser]
    # each trace holds each event once, even where a run was replayed after the crash
    for ticket, kind, run_status, run_id in runs:
        assert run_status in ("completed", "fallback"), (ticket, kind, run_status)
        if kind == "refund":
            assert events[(run_id, "model_response")] == 3, crash.points[ticket]
            assert events[(run_id, "tool_finished")] == 3, crash.points[ticket]
            assert events[(run_id, "approval_requested")] == 1
            assert events[(run_id, "decision")] == 1
        else:
            assert events[(run_id, "triage")] == 1


def shared_winner(crash: Crash) -> int:
    """The shared order's ticket killed after its refund committed: its refund was first."""
    return next(
        t
        for t, p in crash.points.items()
        if p == "tool.returned:2:propose_refund" and crash.kinds[t] == "shared"
    )


def check_steps_ran_once(url: str, crash: Crash, log: Path) -> None:
    """No step did anything after its result was logged; a step ran again only where the
    worker died inside it, before its log entry, and then only that step's work up to the
    point of the kill was done twice (a boundary between steps: only that point)."""
    with sqlite3.connect(log) as c:
        reached = c.execute("SELECT workflow, ticket, name, at FROM boundaries").fetchall()
    client = DBOSClient(system_database_url=system_database_url(url))
    try:
        workflows = client.list_workflows(load_input=False, load_output=False)
        assert {w.status for w in workflows} == {"SUCCESS"}
        tickets = {workflow_id(t) for t in crash.points}
        assert tickets <= {w.workflow_id for w in workflows}
        steps = {w.workflow_id: client.list_workflow_steps(w.workflow_id) for w in workflows}
    finally:
        client.destroy()
    logged = {
        (wid, row["function_name"].removeprefix("desk.")): row["completed_at_epoch_ms"]
        for wid, rows in steps.items()
        for row in rows
        if row["function_name"].startswith("desk.")
    }
    assert not any(n.startswith("tether.") for rows in steps.values() for n in names(rows))
    seen: Counter[tuple[int, str, str]] = Counter()
    first: dict[tuple[int, str, str], float] = {}
    step_at: dict[tuple[int, str, str], str] = {}
    for wid, ticket, name, at in reached:
        key = (ticket, wid, name)
        seen[key] += 1
        first[key] = min(at, first.get(key, at))
        if name in BETWEEN:
            continue
        step_at[key] = step = current_step(wid, name)
        assert at * 1000 <= logged[(wid, step)] + 1, (crash.points[ticket], wid, name)
    killed = {t: (w, step_at.get((t, w, n))) for t, w, n in seen if n == crash.points[t]}
    for (ticket, wid, name), n in seen.items():
        point = crash.points[ticket]
        if name == point:
            if ended_in_step(crash.kinds[ticket], point) and point != "triage.returned":
                # the ending was written before the kill: run again, the step's claim
                # finds the ticket answered (with a person, awaiting its approval) and
                # does nothing more
                assert n == 1 and seen[(ticket, wid, "triage.before")] == 2, (ticket, name)
                continue
            assert n == 2, (ticket, name, n)  # the kill, and the replay past it
            continue
        if name in BETWEEN:  # workflow code, not a step's: a replay runs it again
            continue
        cut = killed.get(ticket)
        redone = (
            cut is not None
            and cut[1] is not None
            and (wid, step_at.get((ticket, wid, name))) == cut
            and first[(ticket, wid, name)] < crash.killed_at
        )
        if redone and ended_in_step(crash.kinds[ticket], point) and n == 1:
            # the ending was written before the kill: run again, the step's claim finds
            # the ticket answered (with a person, awaiting its approval) and does nothing
            # more
            assert name != "triage.before", (point, name)  # the step did run again
            continue
        assert n == (2 if redone else 1), (point, name, n)  # the killed step's work, again
    assert len(seen) > len(crash.points) * 3


def ended_in_step(kind: str, point: str) -> bool:
    """Whether a kill at ``point`` came after the ticket's step wrote its ending (the
    answer, the hand-off to a person, the approval stored): ``desk.triage`` run again
    then finds the ticket moved on at its claim."""
    if kind in ("tracking", "other"):
        return point.endswith(".returned")
    return point in ("approval.returned", "triage.returned")


def names(rows: list[dict[str, object]]) -> list[str]:
    return [str(r["function_name"]) for r in rows]


def current_step(workflow: str, boundary: str) -> str:
    """The step of ``workflow`` that a boundary inside a step belongs to."""
    step, _, _ = boundary.partition(".")
    if step in ("triage", "finish"):
        return step
    return "triage" if workflow.startswith("desk-ticket-") else "finish"
