"""The inbox's and search's query strings, validated as one model per page: the same
answers as FastAPI's own parameters (422 located at the parameter, the last of a
repeated name, unknown names ignored) and the same OpenAPI description."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient
from webclient import login

from tether_desk.pipeline import Desk
from tether_desk.web.app import create_app


@pytest.fixture
def staff(desk: Desk) -> Iterator[TestClient]:
    with TestClient(create_app(desk, start_worker=False), base_url="http://127.0.0.1") as c:
        login(c, "staff")
        yield c


@pytest.mark.parametrize(
    ("query", "where", "kind"),
    [
        ("page=0", "page", "greater_than_equal"),
        ("page=x", "page", "int_parsing"),
        ("page=100001", "page", "less_than_equal"),
        ("assigned=everyone", "assigned", "string_pattern_mismatch"),
        ("status=" + "s" * 33, "status", "string_too_long"),
        ("before=0", "before", "greater_than_equal"),
        ("after=2147483648", "after", "less_than_equal"),
    ],
)
def test_a_bad_inbox_query_is_refused_where_it_is_wrong(
    staff: TestClient, query: str, where: str, kind: str
) -> None:
    r = staff.get(f"/staff/inbox?{query}")
    assert r.status_code == 422
    [error] = r.json()["detail"]
    assert error["loc"] == ["query", where] and error["type"] == kind


def test_a_good_inbox_query_is_read_as_before(staff: TestClient) -> None:
    r = staff.get("/staff/inbox?page=3&page=1&status=needs_human&assigned=me&other=1")
    assert r.status_code == 200
    assert 'hx-get="/staff/inbox?page=1&amp;status=needs_human&amp;assigned=me"' in r.text
    assert staff.get("/staff/search?q=" + "x" * 10_001).status_code == 422
    assert staff.get("/staff/search?q=colis").status_code == 200


def test_the_pages_query_parameters_are_described(staff: TestClient) -> None:
    paths = staff.get("/api/openapi.json").json()["paths"]
    inbox = {p["name"]: p for p in paths["/staff/inbox"]["get"]["parameters"]}
    assert set(inbox) == {"page", "status", "before", "after", "assigned"}
    assert inbox["page"]["in"] == "query" and inbox["page"]["schema"]["minimum"] == 1
    [q] = paths["/staff/search"]["get"]["parameters"]
    assert q["name"] == "q" and q["schema"]["maxLength"] == 10_000
