"""The console's application factory: middleware, templates, errors, login.

Sessions are server-side rows (:mod:`tether_desk.web.sessions`); the cookie holds a
random token (HttpOnly, SameSite=Lax, ``Secure`` and ``__Host-`` behind TLS). The CSRF
secret lives in the database and is created on first start. Logins are throttled
(:mod:`tether_desk.web.throttle`). Customers see only their own tickets; only staff approve.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from jinja2 import Template
from markupsafe import Markup
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from tether_desk.accounts import Principal, authenticate
from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.errors import DeskError, RateLimited, Stale
from tether_desk.models import Setting
from tether_desk.money import format_cents
from tether_desk.notify import start_outbox
from tether_desk.pipeline import Desk
from tether_desk.priority import PagesFirst
from tether_desk.web.csrf import Csrf, cookie_names, cookie_pairs
from tether_desk.web.pages import CountPages
from tether_desk.web.security import BodyGuard, SecurityHeaders
from tether_desk.web.sessions import SessionStore
from tether_desk.web.settings import WebSettings
from tether_desk.web.throttle import Throttle
from tether_desk.web.worker import TicketWorker

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.auto_reload = False  # the templates ship with the package: no stat per render
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


@lru_cache(maxsize=1024)
def page_top(who: Principal | None, csrf: str) -> Markup:
    """The top of every page (the body's CSRF header for htmx, the header and its menus):
    it depends only on the account and the token, so each pair is rendered once."""
    top = templates.env.get_template("page_top.html").module.top  # type: ignore[attr-defined]
    html: Markup = top(who, csrf)
    return html


templates.env.filters["money"] = format_cents
templates.env.filters["when"] = _ago
templates.env.filters["until"] = _until
templates.env.globals["status_words"] = STATUS_WORDS
templates.env.globals["customer_words"] = CUSTOMER_WORDS
templates.env.globals["page_top"] = page_top


def stored_secret(db: Database, key: str) -> str:
    """The secret named ``key``, created on first use and kept in the database."""
    with db.write() as s:
        row = s.get(Setting, key)
        if row is None:
            row = Setting(key=key, value=secrets.token_urlsafe(48))
            s.add(row)
        return row.value


def session_token(request: Request) -> str | None:
    """The session cookie's token; ``None`` without one, or with two (one was set by
    another page: neither is believed)."""
    settings: WebSettings = request.app.state.settings
    name = cookie_names(settings)[0]
    values = [v for k, v in cookie_pairs(request.scope) if k == name]
    return values[0] if len(values) == 1 and values[0] else None


def principal(request: Request) -> Principal | None:
    """Who the request's live server-side session belongs to, if anyone (read once per
    request)."""
    if "desk.who" in request.scope:
        cached: Principal | None = request.scope["desk.who"]
        return cached
    token = session_token(request)
    store: SessionStore = request.app.state.sessions
    who = store.load(token) if token else None
    request.scope["desk.who"] = who
    return who


@lru_cache(maxsize=64)
def _template(name: str) -> Template:
    """A template, loaded once (they ship with the package)."""
    return templates.env.get_template(name)


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """A page, with the logged-in account and the CSRF token in its context (rendered
    straight to an ``HTMLResponse``: Starlette's ``TemplateResponse`` adds what these
    templates do not use, ``request`` and ``url_for``, at a cost on every page)."""
    token = request.scope.get("csrftoken")
    context.setdefault("who", principal(request))
    context["csrf"] = token() if callable(token) else ""
    return HTMLResponse(_template(name).render(context), status_code=status_code)


def wants_json(request: Request) -> bool:
    """True for the JSON API's paths."""
    return request.url.path.startswith("/api/")


class DeskApp(FastAPI):
    """FastAPI with the security headers outside everything, Starlette's own error
    responses included (and the trusted proxies' headers read first)."""

    web: WebSettings = WebSettings()
    pages: PagesFirst | None = None
    """Where the requests in flight are counted (the desk's: its durable steps give way)."""

    def build_middleware_stack(self) -> ASGIApp:
        app: Any = SecurityHeaders(super().build_middleware_stack(), self.web.hsts_seconds)
        if self.pages is not None:
            app = CountPages(app, self.pages)
        if self.web.trusted_proxies:
            app = ProxyHeadersMiddleware(app, trusted_hosts=list(self.web.trusted_proxies))
        wrapped: ASGIApp = app
        return wrapped


def client_address(request: Request) -> str:
    """The client's address (the proxy's ``X-Forwarded-For`` when the proxy is trusted)."""
    return request.client.host if request.client else "unknown"


def create_app(
    desk: Desk,
    *,
    start_worker: bool = True,
    recover: bool = True,
    settings: WebSettings | None = None,
) -> FastAPI:
    """The console for ``desk``; ``start_worker`` processes tickets in this process (a
    durable desk's ``desk.runs``: hands them to its queue), after resuming decided runs
    that never continued if ``recover``; ``settings``: TLS, proxies, sessions, limits."""
    web = settings or WebSettings()
    sessions = SessionStore(desk.db, web)
    throttle = Throttle(desk.db, web)
    session_cookie = cookie_names(web)[0]

    def set_session_cookie(response: Response, token: str) -> None:
        response.set_cookie(
            session_cookie,
            token,
            max_age=int(web.session_absolute.total_seconds()),
            path="/",
            httponly=True,
            samesite="lax",
            secure=web.secure_cookies,
        )

    def drop_session_cookie(response: Response) -> None:
        response.delete_cookie(
            session_cookie, path="/", httponly=True, samesite="lax", secure=web.secure_cookies
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if desk.runs is not None:  # durable: connect to the queue (and take tickets)
            await desk.runs.start()
        worker = TicketWorker(desk, recover=recover)  # one per loop; claims keep tickets to one
        worker.start(process=start_worker)
        app.state.worker = worker
        mail = start_outbox(desk)  # sends queued notifications (None without a mailer)
        try:
            yield
        finally:
            if mail is not None:
                mail.cancel()
            await worker.stop()
            if desk.runs is not None:
                from tether.durable import own_executor

                own_executor()  # before the queue shuts the pool it lent the loop
                await desk.runs.stop()

    app = DeskApp(
        title="tether desk",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    app.web = web
    app.pages = desk.pages
    app.state.desk = desk
    app.state.settings = web
    app.state.sessions = sessions
    app.state.worker = TicketWorker(desk)  # replaced by a running one in the lifespan
    from tether_desk.web import api, customer, health, operator, staff, stream, thread

    # most asked first: a request is matched against the routes in order, so the staff
    # pages come before the login, the static files and the rest (no two share a path)
    app.include_router(staff.router)
    app.include_router(thread.router)
    app.include_router(customer.router)
    app.include_router(stream.router)
    app.include_router(api.router)
    app.include_router(operator.router)
    app.include_router(health.router)
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    app.add_middleware(Csrf, secret=stored_secret(desk.db, "csrf_secret"), settings=web)
    app.add_middleware(BodyGuard)

    from tether_desk.web import faults

    faults.install(app)

    @app.exception_handler(DeskError)
    async def desk_error(request: Request, exc: DeskError) -> Response:
        headers = {"retry-after": str(exc.retry_after)} if isinstance(exc, RateLimited) else None
        if wants_json(request):
            detail: dict[str, Any] = {"detail": str(exc)}
            if isinstance(exc, Stale):
                detail["changes"] = exc.changes
            return JSONResponse(detail, status_code=exc.status_code, headers=headers)
        if isinstance(exc, Stale):
            return render(request, "stale.html", exc.status_code, message=str(exc), exc=exc)
        response = render(request, "error.html", exc.status_code, message=str(exc))
        response.headers.update(headers or {})
        return response

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
        """Log in with an e-mail and a password (throttled per account and address; a
        locked attempt does no password hashing at all)."""
        address = client_address(request)
        try:
            throttle.check(email, address)
        except RateLimited as exc:
            page = render(request, "login.html", 429, error=str(exc))
            page.headers["retry-after"] = str(exc.retry_after)
            return page
        who = authenticate(desk.db, email, password)
        if who is None:
            throttle.failed(email, address)
            return render(request, "login.html", 401, error="Wrong e-mail or password; try again.")
        throttle.succeeded(email, address)
        token = sessions.create(who, previous=session_token(request))
        response = RedirectResponse("/", status_code=303)
        set_session_cookie(response, token)
        return response

    @app.post("/logout", include_in_schema=False)  # ends the caller's session
    def logout(request: Request) -> Response:
        """Log out: the session ends on the server (a copy of the cookie is worthless)."""
        token = session_token(request)
        if token:
            sessions.end(token)
        response = RedirectResponse("/login", status_code=303)
        drop_session_cookie(response)
        return response

    @app.post("/logout/everywhere", include_in_schema=False)
    def logout_everywhere(request: Request) -> Response:
        """End every session of this account, in every browser."""
        who = principal(request)
        if who is not None:
            sessions.end_all(who)
        response = RedirectResponse("/login", status_code=303)
        drop_session_cookie(response)
        return response

    return app
