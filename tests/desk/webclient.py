"""Logging in to the console from a test client (with its CSRF token)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from starlette.testclient import TestClient

TOKEN = re.compile(r'name="csrftoken" value="([^"]+)"')
ACCOUNTS = {
    "marie": ("marie.dupont@client.example", "marie-demo"),
    "paul": ("paul.martin@client.example", "paul-demo"),
    "staff": ("camille@desk.example", "camille-demo"),
}


def token(client: TestClient, path: str = "/login") -> str:
    match = TOKEN.search(client.get(path).text)
    assert match, f"no CSRF token on {path}"
    return match.group(1)


def login(client: TestClient, who: str) -> str:
    """Log ``who`` in; returns the CSRF token to send with forms."""
    email, password = ACCOUNTS[who]
    csrf = token(client)
    r = client.post("/login", data={"email": email, "password": password, "csrftoken": csrf})
    assert r.status_code == 200, r.text
    match = TOKEN.search(r.text)  # the token is bound to the new session
    assert match, "no CSRF token after login"
    return match.group(1)


def wait_for(check: Callable[[], bool], seconds: float = 20) -> None:
    """Poll ``check`` until it holds (the ticket worker runs in the background)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def hidden(html: str, name: str) -> str:
    """The value of the first hidden field ``name`` on a page."""
    match = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert match, f"no field {name}"
    return match.group(1)
