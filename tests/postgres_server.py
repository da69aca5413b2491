"""A throwaway PostgreSQL server on 127.0.0.1, from Debian's binaries, for the tests and
the benchmarks (``tests/conftest.py`` starts one per test session).

PostgreSQL refuses to run as root, so when the tests run as root (CI) the server runs as
the ``postgres`` system user that Debian's package creates. Everything lives in one
temporary directory (data, socket, log) that is removed when the server stops; the server
listens on 127.0.0.1 and on a socket in that directory only.

Its directory is made with :func:`tempfile.mkdtemp` and handed to the ``postgres`` user,
never under pytest's ``/tmp/pytest-of-USER``: every pytest session that starts on the
machine (another person's, or a second one of ours) sets that directory back to mode 0700,
and a server whose data lies below it then fails its next checkpoint ("PANIC: could not
open file .../global/pg_control: Permission denied"; a DROP DATABASE forces one) and
dies. The server is started and stopped by ``pg_ctl`` alone: no process is ever found by
name or environment and killed. When the server is gone before the end, the error
carries the tail of its log.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

MAX_CONNECTIONS = 500
"""Each durable worker holds DBOS's pools and the desk's; a test may run several."""

_names = itertools.count()


def pg_bin() -> Path | None:
    """The directory of Debian's PostgreSQL binaries, newest version first."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    return Path(found[0]).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class PostgresServer:
    """A running server: URLs, databases, its log."""

    root: Path
    port: int
    bindir: Path
    prefix: tuple[str, ...]
    host: str = "127.0.0.1"
    user: str = "postgres"
    options: str = ""
    """The server's command-line options (its port among them), kept for :meth:`start`."""

    @property
    def log(self) -> Path:
        return self.root / "log"

    def url(self, database: str = "postgres", driver: str = "postgresql") -> str:
        """A SQLAlchemy URL (``postgresql://`` suits DBOS and the desk alike)."""
        return f"{driver}://{self.user}@{self.host}:{self.port}/{database}"

    def _admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(
            host=self.host, port=self.port, user=self.user, dbname="postgres", autocommit=True
        )

    def create_database(self, hint: str = "db") -> str:
        """A new empty database; returns its URL."""
        name = f"{re.sub(r'[^a-z0-9_]', '_', hint.lower())[:40]}_{next(_names)}"
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop the database of ``url``; connections still open to it are closed first
        (a SIGKILLed worker's may linger until PostgreSQL notices)."""
        name = url.rsplit("/", 1)[1]
        try:
            with self._admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except psycopg.OperationalError as exc:
            raise AssertionError(self.failure(f"dropping {name} failed: {exc}")) from exc

    def alive(self) -> bool:
        """Whether the postmaster still runs (``pg_ctl status``)."""
        status = subprocess.run(
            [*self.prefix, str(self.bindir / "pg_ctl"), "status", "-D", str(self.root / "data")],
            capture_output=True,
        )
        return status.returncode == 0

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        command = [*self.prefix, str(self.bindir / "pg_ctl"), "-D", str(self.root / "data")]
        return subprocess.run([*command, *args], capture_output=True, text=True, cwd="/")

    def stop(self) -> None:
        """Stop the server (``fast``: open connections are closed at once), keeping its
        data for :meth:`start`; an outage for a test that has a server of its own."""
        done = self._pg_ctl("-m", "fast", "-w", "stop")
        if done.returncode:
            raise AssertionError(self.failure(f"pg_ctl stop failed: {done.stderr.strip()}"))

    def start(self) -> None:
        """Start the stopped server again, on the same port with the same data."""
        done = self._pg_ctl("-o", self.options, "-l", str(self.log), "-w", "-t", "120", "start")
        if done.returncode:
            raise AssertionError(self.failure(f"pg_ctl start failed: {done.stderr.strip()}"))

    def failure(self, what: str) -> str:
        """A message for a failure that may be the server's: what, and its log's tail."""
        state = "running" if self.alive() else "NOT running"
        try:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])
        except OSError as exc:
            tail = f"(no log: {exc})"
        return f"{what}\nthe test PostgreSQL server is {state}; its log ends with:\n{tail}"


@contextmanager
def postgres_server(max_connections: int = MAX_CONNECTIONS) -> Iterator[PostgresServer]:
    """Start a server (trust authentication, user ``postgres``); stop it at the end."""
    bindir = pg_bin()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql")
    root = Path(tempfile.mkdtemp(prefix="tether-pg-"))
    data, sock = root / "data", root / "sock"
    data.mkdir()
    sock.mkdir()
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        for path in (root, data, sock):
            shutil.chown(path, "postgres")
        prefix = ("runuser", "-u", "postgres", "--")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*prefix, *args], capture_output=True, text=True, cwd="/")

    init = run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "-N")
    if init.returncode:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"initdb failed: {init.stderr.strip()}")
    server = None
    for _ in range(5):  # another process may take the free port before the server does
        port = _free_port()
        options = " ".join(
            [
                f"-p {port}",
                f"-k {sock}",
                "-c listen_addresses=127.0.0.1",
                f"-c max_connections={max_connections}",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c log_line_prefix='%m [%p] %d '",
            ]
        )
        start = run(
            str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"),
            "-w", "-t", "120", "start",
        )  # fmt: skip
        if start.returncode == 0:
            server = PostgresServer(root, port, bindir, prefix, options=options)
            break
    if server is None:
        log = (root / "log").read_text(errors="replace") if (root / "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start: {start.stderr.strip()}\n{log[-2000:]}")
    try:
        yield server
    finally:
        stopped = run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        if stopped.returncode and server.alive():
            run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        with contextlib.suppress(OSError):
            shutil.rmtree(root)
