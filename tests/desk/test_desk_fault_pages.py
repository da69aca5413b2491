"""A database fault in the console is a page that says what happened and offers to try
again (503 with Retry-After for a transient one), never a bare "Internal Server Error"."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError
from starlette.testclient import TestClient
from webclient import login

from tether_desk.pipeline import Desk
from tether_desk.web import staff
from tether_desk.web.app import create_app


def raising(exc: Exception) -> object:
    def boom(*_args: object, **_kwargs: object) -> None:
        raise exc

    return boom


@pytest.mark.parametrize(
    ("exc", "code", "says"),
    [
        (OperationalError("INSERT", {}, Exception("database or disk is full")), 503, "try again"),
        (OperationalError("INSERT", {}, Exception("database is locked")), 503, "Nothing was lost"),
        (RuntimeError("/secret/path SELECT password"), 500, "Something went wrong"),
    ],
)
def test_a_fault_is_a_friendly_page_with_a_retry(
    desk: Desk, monkeypatch: pytest.MonkeyPatch, exc: Exception, code: int, says: str
) -> None:
    with TestClient(create_app(desk), raise_server_exceptions=False) as client:
        login(client, "staff")
        monkeypatch.setattr(staff, "inbox_page", raising(exc))
        r = client.get("/staff/inbox?page=1")
        assert r.status_code == code
        assert says in r.text and "Internal Server Error" not in r.text
        assert 'href="/staff/inbox?page=1"' in r.text  # try the same page again
        assert r.headers["retry-after"] == "5"
        assert "/secret/path" not in r.text and "password" not in r.text


def test_the_api_says_it_in_json(desk: Desk, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether_desk.web import api

    with TestClient(create_app(desk), raise_server_exceptions=False) as client:
        login(client, "marie")
        full = OperationalError("SELECT", {}, Exception("disk I/O error"))
        monkeypatch.setattr(api, "customer_tickets", raising(full))
        r = client.get("/api/tickets")
        assert r.status_code == 503
        assert "try again" in r.json()["detail"]
