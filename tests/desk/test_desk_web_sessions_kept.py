"""Sessions kept in the process between reads (``WebSettings.session_recheck``): ended
here, a session stops at once; ended by another process, within the recheck time; the
idle and absolute ends still hold on every request."""

from __future__ import annotations

from datetime import timedelta

import pytest
from starlette.testclient import TestClient
from webclient import login

from tether_desk.accounts import Principal
from tether_desk.clock import utcnow
from tether_desk.pipeline import Desk
from tether_desk.web import sessions as sessions_module
from tether_desk.web.app import create_app
from tether_desk.web.kept_sessions import KeptSessions
from tether_desk.web.sessions import SessionStore
from tether_desk.web.settings import WebSettings

BASE = "http://127.0.0.1"


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def staff(desk: Desk) -> Principal:
    """The seeded staff account, as a session holds it."""
    from sqlalchemy import select

    from tether_desk.models import Staff

    with desk.db.read() as s:
        row = s.scalars(select(Staff).where(Staff.email == "camille@desk.example")).one()
        return Principal("staff", row.id, row.name, row.email)


def statements(desk: Desk) -> list[str]:
    from sqlalchemy import event

    seen: list[str] = []
    event.listen(desk.db.engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    return seen


def test_a_kept_session_is_not_read_again_until_the_recheck_time(desk: Desk) -> None:
    clock = Clock()
    store = SessionStore(desk.db, WebSettings(), monotonic=clock)
    who = staff(desk)
    token = store.create(who)
    seen = statements(desk)
    assert store.load(token) == who
    assert len(seen) == 1
    assert store.load(token) == who
    assert len(seen) == 1  # kept
    clock.now += 5
    assert store.load(token) == who
    assert len(seen) == 2  # read again


def test_ended_here_a_session_stops_at_once(desk: Desk) -> None:
    clock = Clock()
    store = SessionStore(desk.db, WebSettings(), monotonic=clock)
    one, two, three = (store.create(staff(desk)) for _ in range(3))
    for t in (one, two, three):
        assert store.load(t) is not None
    store.end(one)
    assert store.load(one) is None
    store.end_all(staff(desk))
    assert store.load(two) is None and store.load(three) is None
    four = store.create(staff(desk))
    assert store.load(four) is not None
    store.create(staff(desk), previous=four)  # a new login in the same browser
    assert store.load(four) is None


def test_ended_by_another_process_a_session_stops_within_the_recheck_time(desk: Desk) -> None:
    clock = Clock()
    here = SessionStore(desk.db, WebSettings(), monotonic=clock)
    elsewhere = SessionStore(desk.db, WebSettings(), own=KeptSessions())  # another process
    token = here.create(staff(desk))
    assert here.load(token) is not None
    elsewhere.end(token)
    clock.now += 4.9
    assert here.load(token) is not None  # believed up to session_recheck (5 s)
    clock.now += 0.1
    assert here.load(token) is None


def test_consoles_of_one_process_share_what_they_keep(desk: Desk) -> None:
    """Two consoles on one database in one process: a logout in one ends the session in
    the other at once."""
    one = SessionStore(desk.db, WebSettings())
    two = SessionStore(desk.db, WebSettings())
    token = one.create(staff(desk))
    assert one.load(token) is not None and two.load(token) is not None
    one.end(token)
    assert two.load(token) is None


def test_a_read_that_overlaps_an_end_keeps_nothing(desk: Desk) -> None:
    """A read of the row just before another thread deleted it is not kept."""
    store = SessionStore(desk.db, WebSettings(), monotonic=Clock())
    token = store.create(staff(desk))
    other = store.create(staff(desk))
    real = store.db.read_connection

    def racing():  # type: ignore[no-untyped-def]
        cm = real()
        conn = cm.__enter__()
        store.end(other)  # an end lands while this read is under way
        return _Entered(cm, conn)

    store.db.read_connection = racing  # type: ignore[method-assign]
    try:
        assert store.load(token) is not None
    finally:
        store.db.read_connection = real  # type: ignore[method-assign]
    assert sessions_module.session_id(token) not in store.kept.copies


class _Entered:
    def __init__(self, cm: object, conn: object) -> None:
        self.cm, self.conn = cm, conn

    def __enter__(self) -> object:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.cm.__exit__(*exc)  # type: ignore[attr-defined]


def test_the_idle_and_absolute_ends_hold_for_a_kept_session(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    with TestClient(create_app(desk, start_worker=False), base_url=BASE) as client:
        login(client, "staff")
        assert client.get("/staff/inbox").url.path == "/staff/inbox"  # kept now
        later = utcnow() + timedelta(hours=1, minutes=1)
        monkeypatch.setattr(sessions_module, "utcnow", lambda: later)
        assert client.get("/staff/inbox").url.path == "/login"
    settings = WebSettings(session_idle=timedelta(days=1))
    with TestClient(create_app(desk, start_worker=False, settings=settings), base_url=BASE) as c:
        monkeypatch.undo()
        login(c, "staff")
        assert c.get("/staff/inbox").url.path == "/staff/inbox"
        step = utcnow()
        for hours in (2, 4, 6):  # used every two hours: never idle, but 8 h after login...
            at = step + timedelta(hours=hours)
            monkeypatch.setattr(sessions_module, "utcnow", lambda at=at: at)
            assert c.get("/staff/inbox").url.path == "/staff/inbox"
        end = step + timedelta(hours=8, minutes=1)
        monkeypatch.setattr(sessions_module, "utcnow", lambda: end)
        assert c.get("/staff/inbox").url.path == "/login"
