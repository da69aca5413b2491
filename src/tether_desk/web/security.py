"""The console's protective middleware, outermost first.

* :class:`BodyGuard` bounds request bodies (413 past the limit), refuses content types no
  route accepts (415) and form bodies that are not UTF-8 (400), before anything parses them.
* :class:`SecurityHeaders` sends, on every response (errors, 413 and 415 included), a
  Content-Security-Policy with no inline script or style, ``nosniff``, no framing, no
  referrer to other sites, ``Cache-Control: no-store`` (everything but the static files)
  and, behind TLS, ``Strict-Transport-Security``.
* :class:`tether_desk.web.csrf.Csrf` checks the origin and the session-bound token.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY_BYTES = 64 * 1024
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
_FORM_TYPES = (b"application/x-www-form-urlencoded", b"application/json", b"")


async def plain(send: Send, status: int, text: str) -> None:
    """Send a short plain-text response."""
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the app ``body``, already read whole, then ``receive``'s next
    messages (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class BodyGuard:
    """Reads the body once (bounded), checks it, and replays it to the app."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        kind = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
        if kind not in _FORM_TYPES:
            await plain(send, 415, "This content type is not accepted; send a form or JSON.")
            return
        declared = headers.get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await plain(
                send, 413, f"The request is too large; keep it under {self.max_bytes} bytes."
            )
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await plain(
                    send, 413, f"The request is too large; keep it under {self.max_bytes} bytes."
                )
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            await plain(send, 400, "The request body is not UTF-8 text.")
            return
        await self.app(scope, replaying(body, receive), send)


class SecurityHeaders:
    """Adds the Content-Security-Policy and friends to every response."""

    def __init__(self, app: ASGIApp, hsts_seconds: int = 0) -> None:
        self.app = app
        self.common = [
            (b"content-security-policy", CSP.encode()),
            (b"x-content-type-options", b"nosniff"),
            (b"x-frame-options", b"DENY"),
            (b"referrer-policy", b"same-origin"),  # no referrer leaves; Origin stays real
            (b"cross-origin-opener-policy", b"same-origin"),
        ]
        if hsts_seconds > 0:
            hsts = f"max-age={hsts_seconds}; includeSubDomains".encode()
            self.common.append((b"strict-transport-security", hsts))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        static = str(scope.get("path", "")).startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers") or []
                    if static or k.lower() != b"cache-control"
                ]
                headers += self.common
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)
