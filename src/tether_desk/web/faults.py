"""Friendly pages for faults: a database that is briefly unavailable (locked, full,
restarting) answers 503 with a page that says so and offers to try again (``Retry-After``),
and any other unexpected error a plain 500 page; never a bare "Internal Server Error",
never the exception's text (it can hold paths and SQL)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DBAPIError

from tether_desk.operations.transient import is_transient

log = logging.getLogger("tether_desk")
RETRY_AFTER = 5
UNAVAILABLE = (
    "The desk cannot write to its database right now (it may be full, busy or "
    "restarting). Nothing was lost; try again in a moment."
)
BROKEN = "Something went wrong on our side; nothing was changed. Try again in a moment."


def _page(request: Request, status: int, message: str) -> Response:
    from tether_desk.web.app import templates, wants_json

    headers = {"Retry-After": str(RETRY_AFTER)}
    if wants_json(request):
        return JSONResponse({"detail": message}, status_code=status, headers=headers)
    again = request.url.path if request.method == "GET" else "/"
    if request.method == "GET" and request.url.query:
        again += "?" + request.url.query
    context = {"message": message, "again": again, "who": None, "csrf": ""}
    return templates.TemplateResponse(
        request, "unavailable.html", context, status_code=status, headers=headers
    )


def install(app: FastAPI) -> None:
    """Add the fault pages to ``app``."""

    @app.exception_handler(DBAPIError)
    async def database_error(request: Request, exc: DBAPIError) -> Response:
        if is_transient(exc):
            log.warning("database unavailable for %s: %s", request.url.path, exc)
            return _page(request, 503, UNAVAILABLE)
        log.error("database error on %s", request.url.path, exc_info=exc)
        return _page(request, 500, BROKEN)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> Response:
        log.error("unexpected error on %s", request.url.path, exc_info=exc)
        return _page(request, 500, BROKEN)
