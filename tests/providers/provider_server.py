"""A real HTTP server on 127.0.0.1 that answers like a provider, from a script.

Each test scripts replies (JSON, SSE events, error statuses, delays) and reads back every
request the SDK sent, retries included. Error replies carry ``retry-after-ms: 1`` so the
SDK's own backoff stays tiny.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: a JSON body, or SSE ``events`` (``(event_name, data)``)."""

    body: Any = None
    status: int = 200
    events: list[tuple[str | None, Any]] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Seen:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


def error(status: int, body: Any) -> Reply:
    """An error reply that asks the SDK to retry after 1 ms."""
    return Reply(body, status, headers={"retry-after-ms": "1"})


class FakeProvider:
    """The scripted server; ``script`` is a list of replies or a function of the request."""

    def __init__(self) -> None:
        self.requests: list[Seen] = []
        self.script: list[Reply] | Callable[[Seen], Reply] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                seen = Seen(
                    "POST",
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    json.loads(raw) if raw else None,
                )
                reply = fake._next(seen)
                if reply.delay:
                    time.sleep(reply.delay)
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._send(reply)

            def _send(self, reply: Reply) -> None:
                if reply.events is not None:
                    chunks = []
                    for name, data in reply.events:
                        text = data if isinstance(data, str) else json.dumps(data)
                        head = f"event: {name}\n" if name else ""
                        chunks.append(f"{head}data: {text}\n\n")
                    payload = "".join(chunks).encode()
                    ctype = "text/event-stream"
                else:
                    payload = json.dumps(reply.body).encode()
                    ctype = "application/json"
                self.send_response(reply.status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(payload)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), daemon=True
        )

    def _next(self, seen: Seen) -> Reply:
        with self._lock:
            self.requests.append(seen)
            if callable(self.script):
                return self.script(seen)
            if not self.script:
                return Reply({"error": {"type": "test", "message": "script exhausted"}}, 500)
            return self.script.pop(0)

    def bodies(self) -> list[Any]:
        """The JSON bodies received, in order."""
        return [r.body for r in self.requests]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
