"""Sessions kept in the process between reads (``WebSettings.session_recheck``): ended
here or by any other process on the same database file (a real subprocess), a session
stops at the next request; with the shared counter's file unusable (a planted link, a
directory it cannot be made in) nothing is kept; the idle and absolute ends still hold on
every request."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from webclient import login

from tether_desk.accounts import Principal
from tether_desk.clock import utcnow
from tether_desk.db import Database
from tether_desk.pipeline import Desk
from tether_desk.web import ends_epoch
from tether_desk.web import sessions as sessions_module
from tether_desk.web.app import create_app
from tether_desk.web.csrf import cookie_names
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


FOREVER = WebSettings(session_recheck=timedelta(days=365))
"""Copies believed for a year but for ends: only the shared counter can drop them."""

ELSEWHERE = """
import sys
from tether_desk.accounts import Principal
from tether_desk.db import Database
from tether_desk.web.sessions import SessionStore
from tether_desk.web.settings import WebSettings

url, op, token, account = sys.argv[1:]
store = SessionStore(Database(url), WebSettings())
if op == "end":
    store.end(token)
elif op == "end_all":
    store.end_all(Principal("staff", int(account), "", ""))
else:
    store.create(Principal("staff", int(account), "", ""), previous=token)
"""


def in_another_process(db: Database, op: str, token: str, account: int) -> None:
    """``op`` done by a SessionStore of a separate Python process on the same file."""
    subprocess.run(
        [sys.executable, "-c", ELSEWHERE, db.url, op, token, str(account)],
        check=True,
        timeout=120,
    )


@pytest.mark.parametrize("op", ["end", "end_all", "login"])
def test_ended_by_another_process_a_session_stops_at_the_next_request(desk: Desk, op: str) -> None:
    here = SessionStore(desk.db, FOREVER)
    who = staff(desk)
    token, other = here.create(who), here.create(who)
    seen = statements(desk)
    assert here.load(token) == who and here.load(other) == who
    assert here.load(token) == who and len(seen) == 2  # kept
    in_another_process(desk.db, op, token, who.id)
    assert here.load(token) is None
    assert len(seen) == 3  # read anew
    assert here.load(other) == (None if op == "end_all" else who)


def test_a_logout_in_another_process_ends_the_console_session_at_once(desk: Desk) -> None:
    settings = FOREVER
    with TestClient(create_app(desk, start_worker=False, settings=settings), base_url=BASE) as c:
        login(c, "staff")
        assert c.get("/staff/inbox").url.path == "/staff/inbox"
        assert c.get("/staff/inbox").url.path == "/staff/inbox"  # kept now
        token = c.cookies.get(cookie_names(settings)[0])
        assert token
        in_another_process(desk.db, "end", token, staff(desk).id)
        assert c.get("/staff/inbox").url.path == "/login"


def test_an_independent_store_ending_a_session_drops_the_copy(desk: Desk) -> None:
    """Another store with its own copies and its own mapping of the counter."""
    here = SessionStore(desk.db, FOREVER)
    elsewhere = SessionStore(
        desk.db, WebSettings(), own=KeptSessions(ends_epoch.ends_epoch_for(desk.db))
    )
    assert elsewhere.kept.ends is not None and elsewhere.kept.ends is not here.kept.ends
    token = here.create(staff(desk))
    assert here.load(token) is not None
    elsewhere.end(token)
    assert here.load(token) is None


def counted_loads(db: Database) -> tuple[SessionStore, str, list[str]]:
    """A store on ``db`` with a new session, loaded three times; the statements run."""
    store = SessionStore(db, FOREVER, own=KeptSessions(ends_epoch.ends_epoch_for(db)))
    with db.read() as s:
        from sqlalchemy import select

        from tether_desk.models import Staff

        row = s.scalars(select(Staff).where(Staff.email == "camille@desk.example")).one()
        who = Principal("staff", row.id, row.name, row.email)
    token = store.create(who)
    seen: list[str] = []
    from sqlalchemy import event

    event.listen(db.engine, "before_cursor_execute", lambda *a: seen.append(a[2]))
    for _ in range(3):
        assert store.load(token) == who
    store.end(token)
    assert store.load(token) is None
    return store, token, seen


def test_a_planted_link_at_the_counter_keeps_nothing_and_is_not_followed(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = ends_epoch.epoch_path(db)
    assert path is not None and path.parent == tmp_path.resolve()
    target = tmp_path / "victim"
    target.write_bytes(b"precious")
    path.symlink_to(target)
    with caplog.at_level(logging.WARNING, logger=ends_epoch.__name__):
        store, _, seen = counted_loads(db)
    assert store.kept.ends is None and not store.kept.copies
    assert len([q for q in seen if "web_sessions" in q and q.lstrip().startswith("SELECT")]) == 4
    assert target.read_bytes() == b"precious" and path.is_symlink()
    assert "read on every request" in caplog.text


@pytest.mark.parametrize("mode", [0o644, 0o600])
def test_a_wrong_counter_file_keeps_nothing(db: Database, mode: int) -> None:
    """Readable by others, or of the wrong size: not trusted."""
    path = ends_epoch.epoch_path(db)
    assert path is not None
    path.write_bytes(bytes(8 if mode == 0o644 else 5))
    path.chmod(mode)
    store, _, seen = counted_loads(db)
    assert store.kept.ends is None
    assert len([q for q in seen if "web_sessions" in q and q.lstrip().startswith("SELECT")]) == 4


@pytest.mark.parametrize("error", [errno.EACCES, errno.EROFS, errno.ENOSPC])
def test_a_counter_that_cannot_be_made_keeps_nothing(
    db: Database, monkeypatch: pytest.MonkeyPatch, error: int
) -> None:
    """An unwritable or read-only directory, a full disk (the tests run as root, whom
    permissions do not stop, so the system calls fail as they would)."""
    real_open, real_pwrite = os.open, os.pwrite

    def failing_open(path: object, *args: object, **kw: object) -> int:
        if str(path).endswith(ends_epoch.SUFFIX) and error != errno.ENOSPC:
            raise OSError(error, os.strerror(error), str(path))
        return real_open(path, *args, **kw)  # type: ignore[arg-type]

    def failing_pwrite(fd: int, data: bytes, offset: int) -> int:
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(ends_epoch.os, "open", failing_open)
    if error == errno.ENOSPC:
        monkeypatch.setattr(ends_epoch.os, "pwrite", failing_pwrite)
    store, _, seen = counted_loads(db)
    monkeypatch.setattr(ends_epoch.os, "pwrite", real_pwrite)
    assert store.kept.ends is None
    assert len([q for q in seen if "web_sessions" in q and q.lstrip().startswith("SELECT")]) == 4


@pytest.mark.parametrize(
    "url",
    ["sqlite://", "sqlite:///file:d?mode=memory&uri=true", "postgresql+psycopg://u@h/d"],
)
def test_postgresql_and_memory_databases_keep_nothing(url: str) -> None:
    """No file on this host that every process of the database shares."""
    from types import SimpleNamespace

    from sqlalchemy.engine import make_url

    db = SimpleNamespace(url=url, dialect=make_url(url).get_backend_name())
    assert ends_epoch.epoch_path(db) is None  # type: ignore[arg-type]
    assert ends_epoch.ends_epoch_for(db) is None  # type: ignore[arg-type]
    assert KeptSessions(None).now() == -1


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
