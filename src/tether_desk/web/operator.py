"""The console's runs page, for staff with the operator role: every durable run not yet
done, by state, with its age and ticket; those that cannot go on by themselves with the
action that unblocks them (retry, fail to an advisor, recover a dead worker's runs)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Form, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tether.errors import ConfigError
from tether_desk.accounts import Principal
from tether_desk.operations import runs as ops
from tether_desk.operations.attention import (
    current_version,
    desk_runs,
    durable_client,
    forget_cache,
)
from tether_desk.operations.roles import is_operator
from tether_desk.web.app import render
from tether_desk.web.deps import DeskDep, staff_only

router = APIRouter(prefix="/staff/operations")
ORDER = ("error", "stranded", "absent", "cancelled", "waiting", "running", "queued")
WorkflowId = Annotated[str, Form(min_length=1, max_length=200)]


async def operator_only(
    request: Request, who: Annotated[Principal, Depends(staff_only)]
) -> Principal:
    """Staff with the operator role only."""
    desk = request.app.state.desk
    if not await asyncio.to_thread(is_operator, desk.db, who.id):
        raise HTTPException(403, "Only operators see the runs; ask one to grant you the role.")
    return who


Operator = Annotated[Principal, Depends(operator_only)]


@router.get("/runs", response_class=HTMLResponse)
def runs_page(request: Request, who: Operator, desk: DeskDep, done: str = "") -> Response:
    """Every run not yet done, those needing attention first."""
    if durable_client(desk) is None:
        return render(request, "runs.html", durable=False, groups=[], done=done)
    rows = desk_runs(desk, fresh=True)
    groups = [(s, ops.STATE_WORDS[s], [r for r in rows if r.state == s]) for s in ORDER]
    return render(
        request,
        "runs.html",
        durable=True,
        groups=[g for g in groups if g[2]],
        attention=sum(r.needs_attention for r in rows),
        total=len(rows),
        version=current_version(desk),
        done=done,
    )


def _act(desk: DeskDep, what: str) -> Response:
    forget_cache(desk)
    return RedirectResponse(f"/staff/operations/runs?done={what[:300]}", status_code=303)


def _client(desk: DeskDep) -> object:
    client = durable_client(desk)
    if client is None:
        raise HTTPException(409, "This desk runs no durable runs; there is nothing to act on.")
    return client


@router.post("/runs/retry")
def retry_run(who: Operator, desk: DeskDep, workflow_id: WorkflowId) -> Response:
    """Run a stopped, stranded or orphaned run again."""
    try:
        said = ops.retry(_client(desk), desk.db, workflow_id, current_version(desk))  # type: ignore[arg-type]
    except ConfigError as exc:
        raise HTTPException(409, str(exc)) from exc
    return _act(desk, said)


@router.post("/runs/fail")
def fail_run(who: Operator, desk: DeskDep, workflow_id: WorkflowId) -> Response:
    """Stop a run for good and hand its ticket to an advisor."""
    try:
        said = ops.fail(_client(desk), desk.db, workflow_id, current_version(desk))  # type: ignore[arg-type]
    except ConfigError as exc:
        raise HTTPException(409, str(exc)) from exc
    return _act(desk, said)


@router.post("/runs/recover")
def recover_runs(
    who: Operator, desk: DeskDep, executor_id: Annotated[str, Form(min_length=1, max_length=64)]
) -> Response:
    """Hand a dead executor's pending runs to the live workers."""
    try:
        taken = ops.recover(_client(desk), desk.db, [executor_id], current_version(desk))  # type: ignore[arg-type]
    except ConfigError as exc:
        raise HTTPException(409, str(exc)) from exc
    return _act(desk, f"handed {len(taken)} run(s) of {executor_id} to the live workers")
