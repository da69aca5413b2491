"""Engine, sessions and migrations.

SQLite (a file, WAL) by default, PostgreSQL by URL (``postgresql+psycopg://...``).
:meth:`Database.write` opens a transaction that takes the write lock at its start:
``BEGIN IMMEDIATE`` on SQLite (so a read-then-write never fails half way under
concurrency), a plain transaction on PostgreSQL where the services lock the rows they
check (``SELECT ... FOR UPDATE``). :meth:`Database.read` is a plain deferred transaction.

The hot paths use Core connections (:meth:`Database.read_connection`,
:meth:`Database.write_connection`) and statements built once at import with bound
parameters: SQLAlchemy then only looks the compiled statement up in its cache. On SQLite
the ``BEGIN`` goes straight to the driver (one round trip through SQLAlchemy less per
transaction), and the pragmas keep WAL with ``synchronous=NORMAL`` (a commit is an append
to the WAL, made durable at checkpoints), a 16 MB page cache, temporary tables in memory,
and reads of the database file through memory mapping (up to 256 MB: no read system call
per page; writes still go through the WAL).

What ``synchronous=NORMAL`` keeps: every committed transaction survives the process being
killed (SIGKILL, a crash of Python), since the WAL is written before the commit returns;
an operating-system crash or power loss can drop the last commits before the next
checkpoint, never leave half of one (the database stays consistent). ``FULL`` would wait
for the disk at every commit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

if TYPE_CHECKING:
    from tether.state_seal import StateKeys
    from tether.state_store import SqlStateStore

MIGRATIONS = Path(__file__).parent / "migrations"


def sqlite_url(path: str | Path) -> str:
    """The SQLAlchemy URL of a SQLite file."""
    return f"sqlite+pysqlite:///{Path(path)}"


def normalise_url(url: str) -> str:
    """Accept ``postgresql://`` and ``postgres://`` for psycopg 3, and a bare file path."""
    if "://" not in url:
        return sqlite_url(url)
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    return url


class DbTimer:
    """Seconds spent inside the database driver (for the benchmark's share of DB time),
    statements executed and transactions begun."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.statements = 0
        self.transactions = 0


class Database:
    """One engine and its two kinds of transaction."""

    def __init__(self, url: str, *, echo: bool = False, pool_size: int = 20) -> None:
        self.url = normalise_url(url)
        parsed = make_url(self.url)
        self.dialect = parsed.get_backend_name()
        self.timer: DbTimer | None = None
        if self.dialect == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            self.engine = create_engine(
                self.url,
                echo=echo,
                connect_args={"timeout": 60, "check_same_thread": False},
                pool_size=pool_size,
                max_overflow=pool_size * 4,
                pool_timeout=120,
            )
            _sqlite_setup(self.engine, self)
        else:
            self.engine = create_engine(
                self.url, echo=echo, pool_size=pool_size, max_overflow=pool_size * 4
            )
            # an INSERT of several rows is one statement (psycopg's executemany would run
            # one per row, in a pipeline): one server round of parsing and executing
            self.engine.dialect.use_insertmanyvalues_wo_returning = True
            _ping_when_idle(self.engine)
        self._writer = self.engine.execution_options(desk_begin="IMMEDIATE")
        reads: dict[str, Any] = {"desk_begin": "NONE"}
        if self.dialect != "sqlite":  # see read_connection
            reads["isolation_level"] = "AUTOCOMMIT"
        self._reader = self.engine.execution_options(**reads)
        self._store: SqlStateStore | None = None
        self._keys: StateKeys | None = None
        self._store_lock = threading.Lock()
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        self._write = sessionmaker(self._writer, expire_on_commit=False)

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reading (committed at the end if anything was written)."""
        with self._transaction(self._read) as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session whose transaction holds the write lock from its first statement."""
        with self._transaction(self._write) as session:
            yield session

    @contextmanager
    def read_connection(self) -> Iterator[Connection]:
        """A Core connection for reading (cheaper than a session). No transaction is begun:
        each statement reads a consistent state of its own (use :meth:`read` when several
        statements must see the same one on SQLite). On PostgreSQL the connection is in
        autocommit: under READ COMMITTED a transaction would give each statement its own
        snapshot all the same, and it cost two round trips more (``BEGIN``, ``ROLLBACK``)
        while its rollback made psycopg drop the connection's prepared statements (one more
        round trip to deallocate them, and no statement ever prepared)."""
        with self._reader.connect() as connection:
            yield connection
            connection.rollback()

    @contextmanager
    def one_statement(self) -> Iterator[Connection]:
        """A Core connection for a write that is one statement: on PostgreSQL in
        autocommit (the statement is its own transaction: no ``BEGIN`` or ``COMMIT`` round
        trip); on SQLite a write transaction, as :meth:`write_connection`."""
        if self.dialect == "sqlite":
            with self.write_connection() as connection:
                yield connection
            return
        with self._reader.connect() as connection:
            yield connection

    @contextmanager
    def write_connection(self) -> Iterator[Connection]:
        """A Core connection in a write transaction (cheaper than a session, for inserts)."""
        with self._writer.begin() as connection:
            yield connection
            if self.timer is not None:
                t0 = time.perf_counter()
                connection.commit()
                self.timer.seconds += time.perf_counter() - t0

    @contextmanager
    def _transaction(self, factory: sessionmaker[Session]) -> Iterator[Session]:
        session = factory()
        try:
            with session.begin():
                yield session
                if self.timer is not None:  # the commit's own time counts as DB time
                    t0 = time.perf_counter()
                    session.commit()
                    self.timer.seconds += time.perf_counter() - t0
        finally:
            session.close()

    def migrate(self) -> None:
        """Create or upgrade the schema to the latest Alembic revision, and the runtime's
        state store's tables (so processes started later, several at once, find them)."""
        from alembic import command
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", str(MIGRATIONS))
        with self.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
        self.state_store()
        self.state_keys()

    def time_statements(self) -> DbTimer:
        """Start adding up the time spent in the driver; returns the counter."""
        timer = self.timer = DbTimer()

        @event.listens_for(self.engine, "begin")
        def _begun(conn: Any) -> None:
            timer.transactions += 1

        @event.listens_for(self.engine, "before_cursor_execute")
        def _before(
            conn: Any, cursor: Any, statement: Any, params: Any, ctx: Any, many: Any
        ) -> None:
            conn.info.setdefault("desk_t0", []).append(time.perf_counter())

        @event.listens_for(self.engine, "after_cursor_execute")
        def _after(
            conn: Any, cursor: Any, statement: Any, params: Any, ctx: Any, many: Any
        ) -> None:
            timer.seconds += time.perf_counter() - conn.info["desk_t0"].pop()
            timer.statements += 1

        return timer

    def state_store(self) -> SqlStateStore:
        """The runtime's state store on this database (its tables created if missing);
        writes take the write lock first, like the desk's own."""
        with self._store_lock:  # two threads' first calls would both create the tables
            if self._store is None:
                from tether.state_store import SqlStateStore

                # SQLite: the desk's own writes run in the caller's thread, so do the
                # store's (a claim or a finish is one short transaction: a thread hop
                # would cost more)
                self._store = SqlStateStore(self._writer, inline=self.dialect == "sqlite")
        return self._store

    def state_keys(self) -> StateKeys:
        """The keys sealing this database's run states (made at first start and kept beside
        the database, never in it: :mod:`tether_desk.state_keys`)."""
        with self._store_lock:
            if self._keys is None:
                from tether_desk.state_keys import desk_state_keys

                self._keys = desk_state_keys(self.url)
        return self._keys

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()


PING_IDLE_SECONDS = 1.0
"""A pooled PostgreSQL connection idle in the pool this long is pinged before it is lent."""


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection before lending it only if it sat idle in the pool for
    :data:`PING_IDLE_SECONDS`: a connection a server restart cut (a restart lasts longer
    than that) is found and replaced, never handed to a request, while a busy process does
    not pay a round trip per transaction (SQLAlchemy's ``pool_pre_ping`` pings at every
    checkout). A connection lost while it was busy fails its statement; SQLAlchemy then
    replaces every connection of the pool older than the failure."""
    from sqlalchemy.exc import DisconnectionError

    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_connection: Any, record: Any) -> None:
        record.info["desk_idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        since = record.info.pop("desk_idle_since", None)
        if since is None or time.monotonic() - since < PING_IDLE_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            raise DisconnectionError(str(exc)) from exc  # the pool connects anew


SQLITE_PRAGMAS = (
    "PRAGMA journal_mode=WAL",
    "PRAGMA synchronous=NORMAL",
    "PRAGMA foreign_keys=ON",
    "PRAGMA busy_timeout=60000",
    "PRAGMA cache_size=-16000",
    "PRAGMA temp_store=MEMORY",
    "PRAGMA mmap_size=268435456",
)
"""Set on every new SQLite connection."""
_BEGIN = {"DEFERRED": "BEGIN DEFERRED", "IMMEDIATE": "BEGIN IMMEDIATE", "NONE": ""}
"""What starts a transaction of each mode (``NONE``: autocommit reads, one per statement)."""


def _sqlite_setup(engine: Engine, db: Database) -> None:
    """WAL, foreign keys, and transactions begun by us so that BEGIN IMMEDIATE works."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves
        cursor = dbapi_connection.cursor()
        for pragma in SQLITE_PRAGMAS:
            cursor.execute(pragma)
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Any) -> None:
        begin = _BEGIN[connection.get_execution_options().get("desk_begin", "DEFERRED")]
        if not begin:
            return
        driver = connection.connection.driver_connection
        timer = db.timer
        if timer is None:
            driver.execute(begin)  # straight to sqlite3: SQLAlchemy's statement path costs more
            return
        t0 = time.perf_counter()
        driver.execute(begin)
        timer.seconds += time.perf_counter() - t0
        timer.statements += 1
