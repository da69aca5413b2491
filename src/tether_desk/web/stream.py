"""Live run traces over server-sent events.

The stream sends the run's events after a sequence number as they reach the database
(the recorder writes them once per model request), then an ``end`` event with the run's
status when it stops running. It polls the database, so it follows a run resumed by any
process; it ends by itself after ``MAX_SECONDS``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from sse_starlette.sse import EventSourceResponse

from tether_desk.errors import NotFound
from tether_desk.models import Run
from tether_desk.trace import run_events
from tether_desk.web.deps import DeskDep, Staff

router = APIRouter(prefix="/staff")
POLL_SECONDS = 0.25
MAX_SECONDS = 900


@router.get("/runs/{run_id}/events")
async def run_stream(
    request: Request,
    who: Staff,
    desk: DeskDep,
    run_id: Annotated[str, Path(max_length=64, pattern="^[0-9a-f]{8,64}$")],
    after: Annotated[int, Query(ge=0, le=2**31 - 1)] = 0,
) -> EventSourceResponse:
    """The run's trace as server-sent events (``trace`` events, then one ``end``)."""
    with desk.db.read() as s:
        if s.get(Run, run_id) is None:
            raise NotFound("There is no such run.")

    async def events() -> AsyncIterator[dict[str, Any]]:
        last = after
        deadline = time.monotonic() + MAX_SECONDS
        while time.monotonic() < deadline:
            # the status first: a run's last events commit with its final status, so once
            # the status is final the read below sees every event (no end before them)
            with desk.db.read() as s:
                run = s.get(Run, run_id)
                status, kind = (run.status, run.kind) if run else ("gone", "")
            rows = await asyncio.to_thread(run_events, desk.db, run_id, last)
            for row in rows:
                last = row.seq
                payload = {"seq": row.seq, "kind": row.kind, "data": row.data}
                yield {"event": "trace", "id": str(row.seq), "data": json.dumps(payload)}
            if status != "running" and not rows:
                yield {"event": "end", "data": json.dumps({"status": status, "kind": kind})}
                return
            if await request.is_disconnected():
                return
            await asyncio.sleep(POLL_SECONDS)

    return EventSourceResponse(events(), ping=15)
