"""``/healthz`` (the process answers), ``/readyz`` (it can serve: its database answers,
and on a durable desk its durable log) and ``/metrics`` (Prometheus text, see
:mod:`tether_desk.operations.metrics`). None needs a login: they say nothing about a
ticket's content; keep them off the public side of a proxy all the same."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from tether_desk.operations.attention import durable_client
from tether_desk.operations.metrics import desk_registry
from tether_desk.pipeline import Desk

router = APIRouter(include_in_schema=False)


@router.get("/healthz")
async def healthz() -> Response:
    """The process is up."""
    return JSONResponse({"status": "ok"})


def _ready(desk: Desk) -> dict[str, str]:
    checks: dict[str, str] = {}
    try:
        with desk.db.read_connection() as c:
            c.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unavailable: {type(exc).__name__}"
    if desk.runs is not None:
        client = durable_client(desk)
        if client is None:
            checks["durable_log"] = "not connected yet"
        else:
            try:
                client.check_connection()
                checks["durable_log"] = "ok"
            except Exception as exc:
                checks["durable_log"] = f"unavailable: {type(exc).__name__}"
    return checks


@router.get("/readyz")
async def readyz(request: Request) -> Response:
    """200 when the database (and the durable log) answer, else 503 with what does not."""
    checks = await asyncio.to_thread(_ready, request.app.state.desk)
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ready" if ready else "not ready", "checks": checks},
        status_code=200 if ready else 503,
    )


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    """The desk's metrics in the Prometheus text format."""
    app = request.app
    registry = getattr(app.state, "metrics", None)
    if registry is None:
        registry = app.state.metrics = desk_registry(app.state.desk)
    body = await asyncio.to_thread(generate_latest, registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
