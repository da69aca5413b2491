"""CSRF protection bound to the session, on every unsafe request (forms and the JSON API).

Two checks, both required:

* **Origin.** A browser's ``Origin`` header (or, when it is absent or ``null``,
  ``Sec-Fetch-Site``) must name this console's own origin: a page on another port or a
  sibling subdomain is same-site but not same-origin, and is refused.
* **Token.** The token is an HMAC, under a secret kept in the database, of the browser's
  session id (the SHA-256 of the session cookie) or, before login, of a random anonymous
  cookie. It arrives in the form field ``csrftoken`` or the ``x-csrftoken`` header. A token
  taken from another browser (an attacker's own visit) is bound to that browser's
  cookies, not the victim's; a request carrying the session cookie twice (one tossed in
  by another page) is refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

from tether_desk.web.security import ASGIApp, Message, Receive, Scope, Send, plain, replaying
from tether_desk.web.settings import WebSettings

SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
COOKIES = "desk.cookies"
"""Where the request's parsed cookies are kept in its scope."""
FIELD = "csrftoken"
HEADER = b"x-csrftoken"
FAILED = "The form's security token is missing or does not match; reload the page and try again."
TOKENS_KEPT = 4096
"""Tokens kept per process (past it, all are dropped and worked out again)."""
CROSS_ORIGIN = "This request came from another site; open the desk's own page and try again."


def cookie_names(settings: WebSettings) -> tuple[str, str]:
    """The session cookie's and the anonymous cookie's names."""
    return f"{settings.cookie_prefix}desk_session", f"{settings.cookie_prefix}desk_anon"


def cookie_pairs(scope: Scope) -> list[tuple[str, str]]:
    """Every cookie of the request, duplicates kept, in the order sent (parsed once per
    request)."""
    if COOKIES in scope:
        parsed: list[tuple[str, str]] = scope[COOKIES]
        return parsed
    out: list[tuple[str, str]] = []
    for name, value in scope.get("headers") or []:
        if name == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, sep, val = part.strip().partition("=")
                if sep:
                    out.append((key.strip(), val.strip()))
    return out


class Csrf:
    """Checks every unsafe request; puts ``scope["csrftoken"]`` (a callable giving the
    token for pages) and sets the anonymous cookie when a browser has neither cookie."""

    def __init__(self, app: ASGIApp, secret: str, settings: WebSettings) -> None:
        self.app = app
        self.key = secret.encode()
        self.settings = settings
        self.session_name, self.anon_name = cookie_names(settings)
        self.tokens: dict[tuple[str, str], str] = {}

    def token_for(self, kind: str, value: str) -> str:
        """The token bound to one cookie's value (worked out once per cookie and kept:
        a browser sends the same cookie on every request)."""
        key = (kind, value)
        token = self.tokens.get(key)
        if token is None:
            bound = hashlib.sha256(value.encode()).hexdigest()
            digest = hmac.new(self.key, f"{kind}:{bound}".encode(), hashlib.sha256).digest()
            token = base64.urlsafe_b64encode(digest).decode().rstrip("=")
            if len(self.tokens) >= TOKENS_KEPT:
                self.tokens.clear()
            self.tokens[key] = token
        return token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        pairs = cookie_pairs(scope)
        scope[COOKIES] = pairs  # the session's lookup reads them again
        sessions = [v for k, v in pairs if k == self.session_name]
        anons = [v for k, v in pairs if k == self.anon_name]
        new_anon: str | None = None
        if sessions:
            expected = self.token_for("session", sessions[0])
        elif anons:
            expected = self.token_for("anon", anons[0])
        else:
            new_anon = secrets.token_urlsafe(24)
            expected = self.token_for("anon", new_anon)
        if scope["method"] not in SAFE:
            if not self._same_origin(scope):
                await plain(send, 403, CROSS_ORIGIN)
                return
            body, receive = await _buffer(receive)
            sent = _sent_token(scope, body)
            tossed = len(sessions) > 1 or len(anons) > 1
            if tossed or not sent or not hmac.compare_digest(sent, expected):
                await plain(send, 403, FAILED)
                return
        scope["csrftoken"] = _const(expected)
        if new_anon is None:
            await self.app(scope, receive, send)
            return
        cookie = self._anon_cookie(new_anon)

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), cookie]}
            await send(message)

        await self.app(scope, receive, send_with_cookie)

    def _anon_cookie(self, value: str) -> tuple[bytes, bytes]:
        c: SimpleCookie = SimpleCookie()
        c[self.anon_name] = value
        c[self.anon_name]["path"] = "/"
        c[self.anon_name]["httponly"] = True
        c[self.anon_name]["samesite"] = "lax"
        if self.settings.secure_cookies:
            c[self.anon_name]["secure"] = True
        return b"set-cookie", c.output(header="").strip().encode("latin-1")

    def _same_origin(self, scope: Scope) -> bool:
        headers: dict[bytes, bytes] = dict(scope.get("headers") or [])
        origin = headers.get(b"origin")
        host = headers.get(b"host", b"").decode("latin-1")
        site = headers.get(b"sec-fetch-site")
        if origin is not None and origin != b"null":
            return origin.decode("latin-1") == f"{scope.get('scheme', 'http')}://{host}"
        if site is not None:
            return site in (b"same-origin", b"none")
        return origin is None  # "null" without Sec-Fetch-Site: an opaque origin, refused


def _const(value: str) -> Callable[[], str]:
    return lambda: value


async def _buffer(receive: Receive) -> tuple[bytes, Receive]:
    """The whole body (already bounded by the body guard) and a receive that replays it."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    return body, replaying(body, receive)


def _sent_token(scope: Scope, body: bytes) -> str:
    headers: dict[bytes, Any] = dict(scope.get("headers") or [])
    header = headers.get(HEADER)
    if header:
        return str(header.decode("latin-1"))
    kind = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
    if kind == b"application/x-www-form-urlencoded":
        values = parse_qs(body.decode("utf-8", "replace")).get(FIELD) or [""]
        return values[0]
    return ""
