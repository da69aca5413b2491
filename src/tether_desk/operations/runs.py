"""The operator's view of a durable desk's runs, and the actions that unblock them.

Every workflow of the desk (a ticket's, or a decision's: ``desk-finish:RUN:CALL``, started
by the decision) not yet done is in one state: ``running``, ``waiting`` (only a run of the
previous layout, which waited for its decision in a workflow), ``queued``, ``absent`` (pending on
an executor that is stopped or dead: it resumes at that executor's next start, or on a
live one after :func:`recover`), ``error`` (a step failed for good, or the code changed
under a logged run), ``stranded`` (logged by another application version, which no
process of this one runs) or ``cancelled`` (stopped by an operator). The last four need
attention; their ticket shows it (never "being read" forever).

The actions go through a :class:`dbos.DBOSClient`, so a console or ``tether runs`` acts
without running DBOS itself: :func:`retry` runs a run again from its last completed step
where DBOS can (an ERROR rewound to the failed step, a run past its recovery attempts
resumed), else from its first step under this version, with the same workflow id, so the
same run ids and idempotency keys (a refund already made is not made twice);
:func:`fail` stops a run and hands its ticket to an advisor; :func:`recover` hands the
runs of dead executors to the live ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dbos import DBOSClient
from dbos._error import DBOSUnexpectedStepError
from sqlalchemy import select

from tether.errors import ConfigError
from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.durable.flow import APPROVAL_WORKFLOW, FINISH_WORKFLOW, TICKET_WORKFLOW
from tether_desk.models import Approval, Run
from tether_desk.operations.liveness import Executor, executors
from tether_desk.pipeline import set_status

NAMES = [TICKET_WORKFLOW, FINISH_WORKFLOW, APPROVAL_WORKFLOW]
"""The desk's workflows: a ticket's, a decision's, and the previous layout's wait."""
ACTIVE = ["PENDING", "ENQUEUED", "DELAYED"]
STOPPED = ["ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED", "CANCELLED"]
STATE_WORDS = {
    "running": "running",
    "waiting": "waiting for approval",
    "queued": "queued",
    "absent": "pending on a stopped or dead worker",
    "error": "failed (ERROR)",
    "stranded": "stranded by a version change",
    "cancelled": "stopped by an operator",
    "done": "done",
}
ATTENTION = frozenset({"absent", "error", "stranded"})
ACTIONS = {
    "absent": "start its worker again, or recover it onto a live one",
    "error": "retry it (from its last completed step), or fail it to an advisor",
    "stranded": "drain it with the old version's code, or retry it under this version",
}


@dataclass(frozen=True, slots=True)
class RunRow:
    """One workflow of the desk, as an operator sees it."""

    workflow_id: str
    kind: str
    """``ticket`` or ``approval`` (a decision's workflow)."""
    ticket_id: int | None
    state: str
    status: str
    """DBOS's own status."""
    executor_id: str
    version: str
    created: datetime
    updated: datetime
    error: str = ""
    queue: str | None = field(default=None, compare=False)

    @property
    def needs_attention(self) -> bool:
        return self.state in ATTENTION

    @property
    def words(self) -> str:
        return STATE_WORDS[self.state]

    @property
    def action(self) -> str:
        return ACTIONS.get(self.state, "")

    def age(self, now: datetime | None = None) -> str:
        """How long since the run started, in words (``3 h 05 min``)."""
        seconds = int(((now or utcnow()) - self.created).total_seconds())
        hours, rest = divmod(max(seconds, 0), 3600)
        return f"{hours} h {rest // 60:02d} min" if hours else f"{rest // 60} min {rest % 60:02d} s"


def _when(ms: int | None) -> datetime:
    return datetime.fromtimestamp((ms or 0) / 1000, UTC).replace(tzinfo=None)


def _state(status: Any, version: str, alive: dict[str, Executor], waiting: set[str]) -> str:
    if status.status == "SUCCESS":
        return "done"
    if status.status == "CANCELLED":
        return "cancelled"
    if status.status in STOPPED:
        return "error"
    if status.app_version != version:
        return "stranded"
    if status.status != "PENDING":
        return "queued"
    executor = alive.get(status.executor_id or "")
    if executor is None or not executor.alive():
        return "absent"
    return "waiting" if status.workflow_id in waiting else "running"


def _error(status: Any) -> str:
    err = status.error
    if err is None:
        return ""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text[:300]


def _rows(db: Database, statuses: Iterable[Any], version: str) -> list[RunRow]:
    statuses = list(statuses)
    alive = executors(db)
    run_ids = {
        s.workflow_id.split(":")[1]: s.workflow_id
        for s in statuses
        if s.name in (APPROVAL_WORKFLOW, FINISH_WORKFLOW) and s.workflow_id.count(":") >= 2
    }
    tickets: dict[str, int] = {}
    waiting: set[str] = set()
    if run_ids:
        with db.read() as s:
            for run_id, ticket_id in s.execute(
                select(Run.id, Run.ticket_id).where(Run.id.in_(run_ids))
            ):
                tickets[run_ids[run_id]] = int(ticket_id)
            for run_id, call_id in s.execute(
                select(Approval.run_id, Approval.call_id).where(
                    Approval.run_id.in_(run_ids), Approval.status == "pending"
                )
            ):
                waiting.add(f"desk-wait:{run_id}:{call_id}")
    rows = []
    for st in statuses:
        kind = "ticket" if st.name == TICKET_WORKFLOW else "approval"
        ticket = (
            int(st.workflow_id.rsplit("-", 1)[1])
            if kind == "ticket"
            else tickets.get(st.workflow_id)
        )
        rows.append(
            RunRow(
                st.workflow_id,
                kind,
                ticket,
                _state(st, version, alive, waiting),
                str(st.status),
                st.executor_id or "",
                st.app_version or "",
                _when(st.created_at),
                _when(st.updated_at),
                _error(st),
                st.queue_name,
            )
        )
    return rows


def list_runs(
    client: DBOSClient, db: Database, version: str, *, done: bool = False, limit: int = 1000
) -> list[RunRow]:
    """The desk's runs not yet done (with ``done``, the finished ones too), oldest first."""
    names = NAMES
    found = client.list_workflows(
        name=names, status=ACTIVE, load_input=False, load_output=False, limit=limit
    )
    found += client.list_workflows(name=names, status=STOPPED, load_input=False, limit=limit)
    if done:
        found += client.list_workflows(
            name=names, status="SUCCESS", load_input=False, load_output=False, limit=limit
        )
    rows = _rows(db, found, version)
    return sorted(rows, key=lambda r: r.created)


def get_run(client: DBOSClient, db: Database, workflow_id: str, version: str) -> RunRow:
    """One run, or :class:`~tether.errors.ConfigError` if there is none."""
    found = client.list_workflows(workflow_ids=[workflow_id], load_input=False)
    if not found:
        raise ConfigError(f"there is no run {workflow_id!r}; `tether runs list` shows them")
    return _rows(db, found, version)[0]


def steps(client: DBOSClient, workflow_id: str) -> list[dict[str, Any]]:
    """A run's logged steps: id, name, whether it failed (and why)."""
    return [
        {
            "step": s["function_id"],
            "name": s["function_name"],
            "error": str(s["error"]).splitlines()[0][:200] if s["error"] is not None else "",
        }
        for s in client.list_workflow_steps(workflow_id, load_output=False)
    ]


def restart_step(client: DBOSClient, workflow_id: str, error: Any) -> int:
    """Where a stopped run goes on: at the step whose logged name the code no longer
    has (a change deployed without raising the version), else at its failed step, else
    after its last logged one."""
    if isinstance(error, DBOSUnexpectedStepError):
        return int(error.inputs[1])
    logged = client.list_workflow_steps(workflow_id, load_output=True)
    failed = [s["function_id"] for s in logged if s["error"] is not None]
    if failed:
        return min(failed)
    return max((s["function_id"] for s in logged), default=0) + 1


def retry(client: DBOSClient, db: Database, workflow_id: str, version: str) -> str:
    """Run a stopped, stranded or orphaned run again (see the module doc); says what
    was done. A run that is going on is left alone."""
    row = get_run(client, db, workflow_id, version)
    if row.state in ("running", "waiting", "queued", "done"):
        raise ConfigError(f"run {workflow_id} is {row.words}; there is nothing to retry")
    if row.status == "MAX_RECOVERY_ATTEMPTS_EXCEEDED" and row.version == version:
        client.resume_workflow(workflow_id, queue_name=row.queue)
        return f"{workflow_id}: resumed from its last completed step"
    if row.state == "absent":
        client.resume_workflow(workflow_id, queue_name=row.queue)
        return f"{workflow_id}: handed to the live workers, from its last completed step"
    if row.state == "stranded":
        client.cancel_workflow(workflow_id)
        client.rewind_workflow(
            workflow_id, start_step=1, application_version=version, queue_name=row.queue
        )
        return (
            f"{workflow_id}: re-run from its first step under version {version} "
            "(same run ids and idempotency keys)"
        )
    error = client.list_workflows(workflow_ids=[workflow_id], load_input=False)[0].error
    step = restart_step(client, workflow_id, error)
    client.rewind_workflow(
        workflow_id, start_step=step, application_version=version, queue_name=row.queue
    )
    return f"{workflow_id}: re-run from step {step} under version {version}"


def fail(client: DBOSClient, db: Database, workflow_id: str, version: str) -> str:
    """Stop a run for good and hand its ticket to an advisor (its pending approval, if
    any, expires: no decision on it can be delivered any more)."""
    row = get_run(client, db, workflow_id, version)
    if row.state == "done":
        raise ConfigError(f"run {workflow_id} is done; there is nothing to fail")
    client.cancel_workflow(workflow_id)
    if row.ticket_id is not None:
        if row.kind == "approval":
            run_id = workflow_id.split(":")[1]
            with db.write() as s:
                for approval in s.scalars(
                    select(Approval).where(Approval.run_id == run_id, Approval.status == "pending")
                ):
                    approval.status = "expired"
                    approval.decided_at = utcnow()
        set_status(db, row.ticket_id, "failed")
    return f"{workflow_id}: stopped; ticket {row.ticket_id} goes to an advisor"


def recover(
    client: DBOSClient, db: Database, executor_ids: list[str], version: str, *, force: bool = False
) -> list[str]:
    """Hand the pending runs of executors that are gone to the live workers (each goes
    on from its last completed step); an executor with a fresh heartbeat is refused
    unless ``force`` (two executors would run the same run)."""
    alive = executors(db)
    for eid in executor_ids:
        if not force and eid in alive and alive[eid].alive():
            raise ConfigError(
                f"executor {eid!r} is alive (pid {alive[eid].pid}); stop it before taking "
                "over its runs"
            )
    pending = client.list_workflows(
        name=NAMES,
        status="PENDING",
        executor_id=executor_ids,
        app_version=version,
        load_input=False,
        load_output=False,
    )
    for st in pending:
        client.resume_workflow(st.workflow_id, queue_name=st.queue_name)
    return [st.workflow_id for st in pending]


def attention_by_ticket(rows: Iterable[RunRow]) -> dict[int, RunRow]:
    """Tickets with a run that needs attention, and that run."""
    return {r.ticket_id: r for r in rows if r.needs_attention and r.ticket_id is not None}
