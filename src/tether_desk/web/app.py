"""The console's application factory: middleware, templates, errors, login.

Sessions are signed cookies (Starlette's ``SessionMiddleware``: HttpOnly, SameSite=Lax)
holding the account's role and id; the signing secrets live in the database and are
created on first start. Customers see only their own tickets; only staff approve.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.sessions import SessionMiddleware

from tether_desk.accounts import Principal, authenticate
from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.errors import DeskError
from tether_desk.models import Setting
from tether_desk.money import format_cents
from tether_desk.pipeline import Desk
from tether_desk.web.security import BodyGuard, Csrf, SecurityHeaders
from tether_desk.web.worker import TicketWorker

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.auto_reload = False  # the templates ship with the package: no stat per render
SESSION_COOKIE = "desk_session"
SESSION_HOURS = 8
STATUS_WORDS = {
    "new": "received",
    "triaging": "being read",
    "answered": "answered",
    "awaiting_approval": "refund waiting for approval",
    "draft_ready": "reply being checked",
    "needs_human": "with an advisor",
    "failed": "with an advisor",
}
CUSTOMER_WORDS = {
    **STATUS_WORDS,
    "awaiting_approval": "being handled",
    "draft_ready": "being handled",
}


def _ago(value: datetime | None) -> str:
    if value is None:
        return ""
    return value.isoformat(" ", "minutes")  # "%Y-%m-%d %H:%M", a tenth of strftime's cost


def _until(value: datetime) -> str:
    left = (value - utcnow()).total_seconds()
    if left <= 0:
        return "expired"
    hours, rest = divmod(int(left), 3600)
    return f"in {hours} h {rest // 60:02d} min"


templates.env.filters["money"] = format_cents
templates.env.filters["when"] = _ago
templates.env.filters["until"] = _until
templates.env.globals["status_words"] = STATUS_WORDS
templates.env.globals["customer_words"] = CUSTOMER_WORDS


def stored_secret(db: Database, key: str) -> str:
    """The secret named ``key``, created on first use and kept in the database."""
    with db.write() as s:
        row = s.get(Setting, key)
        if row is None:
            row = Setting(key=key, value=secrets.token_urlsafe(48))
            s.add(row)
        return row.value


def principal(request: Request) -> Principal | None:
    """Who the signed session cookie names, if anyone."""
    data = request.session.get("who")
    if not isinstance(data, dict):
        return None
    try:
        return Principal(data["role"], int(data["id"]), str(data["name"]), str(data["email"]))
    except (KeyError, TypeError, ValueError):
        return None


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """A page, with the logged-in account and the CSRF token in its context."""
    token = request.scope.get("csrftoken")
    context.setdefault("who", principal(request))
    context["csrf"] = token() if callable(token) else ""
    return templates.TemplateResponse(request, name, context, status_code=status_code)


def wants_json(request: Request) -> bool:
    """True for the JSON API's paths."""
    return request.url.path.startswith("/api/")


def create_app(
    desk: Desk, *, start_worker: bool = True, secure_cookies: bool = False, recover: bool = True
) -> FastAPI:
    """The console for ``desk``; ``start_worker`` processes tickets in this process (a
    durable desk's ``desk.runs``: hands them to its queue), after resuming decided runs
    that never continued if ``recover``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if desk.runs is not None:  # durable: connect to the queue (and take tickets)
            await desk.runs.start()
        worker = TicketWorker(desk, recover=recover)  # one per loop; claims keep tickets to one
        worker.start(process=start_worker)
        app.state.worker = worker
        try:
            yield
        finally:
            await worker.stop()
            if desk.runs is not None:
                await desk.runs.stop()

    app = FastAPI(
        title="tether desk",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    app.state.desk = desk
    app.state.worker = TicketWorker(desk)  # replaced by a running one in the lifespan
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    app.add_middleware(
        SessionMiddleware,
        secret_key=stored_secret(desk.db, "session_secret"),
        session_cookie=SESSION_COOKIE,
        max_age=SESSION_HOURS * 3600,
        same_site="lax",
        https_only=secure_cookies,
    )
    app.add_middleware(Csrf, secret=stored_secret(desk.db, "csrf_secret"))
    app.add_middleware(SecurityHeaders)
    app.add_middleware(BodyGuard)

    from tether_desk.web import faults

    faults.install(app)

    @app.exception_handler(DeskError)
    async def desk_error(request: Request, exc: DeskError) -> Response:
        if wants_json(request):
            return JSONResponse({"detail": str(exc)}, status_code=exc.status_code)
        return render(request, "error.html", exc.status_code, message=str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code in (302, 303) and exc.headers:
            return RedirectResponse(exc.headers["location"], status_code=303)
        if wants_json(request):
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
        message = exc.detail if isinstance(exc.detail, str) else "This page does not exist."
        return render(request, "error.html", exc.status_code, message=message)

    @app.get("/", include_in_schema=False)
    async def home(request: Request) -> Response:
        who = principal(request)
        if who is None:
            return RedirectResponse("/login", status_code=303)
        return RedirectResponse("/staff/inbox" if who.role == "staff" else "/my/tickets", 303)

    @app.get("/login", response_class=HTMLResponse)
    async def login_page(request: Request) -> Response:
        """The login form."""
        return render(request, "login.html")

    @app.post("/login", response_class=HTMLResponse)
    def login(
        request: Request, email: str = Form(max_length=254), password: str = Form(max_length=256)
    ) -> Response:
        """Log in with an e-mail and a password."""
        who = authenticate(desk.db, email, password)
        if who is None:
            return render(request, "login.html", 401, error="Wrong e-mail or password; try again.")
        request.session.clear()
        request.session["who"] = {
            "role": who.role,
            "id": who.id,
            "name": who.name,
            "email": who.email,
        }
        return RedirectResponse("/", status_code=303)

    @app.post("/logout")
    async def logout(request: Request) -> Response:
        """Log out."""
        request.session.clear()
        return RedirectResponse("/login", status_code=303)

    from tether_desk.web import api, customer, health, operator, staff, stream

    app.include_router(customer.router)
    app.include_router(staff.router)
    app.include_router(stream.router)
    app.include_router(api.router)
    app.include_router(operator.router)
    app.include_router(health.router)
    return app
