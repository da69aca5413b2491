"""Workers on PostgreSQL woken by the database when a run is queued, instead of polling.

A worker's queue threads look at their queues when this process enqueues or a place frees
(:mod:`~tether.durable.dispatch`); a run queued by another process (a console's new
ticket or decision, a client, a recovery handing a dead worker's runs back) used to wait
for the next poll. On PostgreSQL, :func:`install` adds a trigger to DBOS's
``workflow_status`` table that sends a notification on :data:`CHANNEL`, carrying the
queue's name, whenever a row becomes ``ENQUEUED`` (inserted so, or set back to it); it is
delivered when the enqueuing transaction commits. Each worker keeps one connection
listening on the channel (:class:`Listener`, a thread) and rings the named queue's
doorbell: the queue is looked at at once. While it listens, a queue found empty is
looked at only every :data:`~tether.durable.dispatch.LISTENED_IDLE_SECONDS` (a fallback),
so an idle worker costs next to nothing; while it does not (the connection was lost, or
the trigger could not be created: a database user that does not own DBOS's tables), the
queue is polled as before.

The trigger is created once per database (under an advisory lock, if missing) by the
first worker that starts; it does nothing but notify, in the enqueuing transaction.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from tether.durable import dispatch

log = logging.getLogger("tether.durable")

CHANNEL = "tether_queue"
"""The notification channel; the payload is the queue's name."""

TRIGGER = "tether_queue_wakeup"
"""The trigger's and its function's name (the function lives in DBOS's schema)."""

CHECK_SECONDS = 10.0
"""How often a listening worker makes sure the trigger is still there (a DBOS migration
that rebuilt its status table would have dropped it, leaving the worker listening to a
channel nobody notifies): made again if it is gone, and the queues looked at."""

_LOCK_KEY = 0x7E7E_0001_5155_4555
"""The advisory lock under which a worker creates the trigger."""


def _function_sql(schema: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION "{schema}".{TRIGGER}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.queue_name IS NOT NULL
     AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM NEW.status) THEN
    PERFORM pg_notify('{CHANNEL}', NEW.queue_name);
  END IF;
  RETURN NULL;
END $$"""


def _trigger_sql(schema: str, table: str) -> str:
    return (
        f'CREATE TRIGGER {TRIGGER} AFTER INSERT OR UPDATE OF status ON "{schema}".{table}'
        f" FOR EACH ROW WHEN (NEW.status = 'ENQUEUED')"
        f' EXECUTE FUNCTION "{schema}".{TRIGGER}()'
    )


_EXISTS = "SELECT 1 FROM pg_trigger WHERE tgname = :name AND tgrelid = CAST(:table AS regclass)"


def _exists(c: Any, sys_db: Any) -> bool:
    """Whether the trigger is on ``sys_db``'s status table (read on connection ``c``)."""
    import sqlalchemy as sa

    table = f'"{sys_db.schema}".{sys_db.tables.workflow_status.name}'
    return c.execute(sa.text(_EXISTS), {"name": TRIGGER, "table": table}).first() is not None


def install_trigger(sys_db: Any) -> bool:
    """Create the trigger on ``sys_db``'s (DBOS's PostgreSQL system database) status
    table if it is missing; whether it is there."""
    import sqlalchemy as sa

    schema, table = sys_db.schema, sys_db.tables.workflow_status.name
    try:
        with sys_db.engine.begin() as c:
            if _exists(c, sys_db):
                return True
            log.info("creating the queue wake-up trigger on %s.%s", schema, table)
            c.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
            if not _exists(c, sys_db):  # not made meanwhile
                c.exec_driver_sql(_function_sql(schema))
                c.exec_driver_sql(_trigger_sql(schema, table))
        return True
    except sa.exc.DBAPIError as exc:
        log.warning(
            "queued runs are found by polling: the wake-up trigger could not be created (%s)",
            exc.orig if exc.orig is not None else exc,
        )
        return False


class Listener:
    """A thread listening on :data:`CHANNEL` that rings the named queue's doorbell."""

    def __init__(self, sys_db: Any) -> None:
        self._sys_db = sys_db
        self._stop = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="tether-queue-wakeup", daemon=True)

    def start(self) -> Listener:
        self._thread.start()
        return self

    def stop(self, wait: float = 2.0) -> None:
        """Stop listening: an empty notification wakes the thread, which ends; wait up to
        ``wait`` for it (a lost connection ends it too)."""
        import sqlalchemy as sa

        self._stop.set()
        if not self._thread.is_alive() or self._thread is threading.current_thread():
            return
        try:
            with self._sys_db.engine.begin() as c:
                c.execute(sa.text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})
        except sa.exc.DBAPIError:
            pass  # the server is gone: so is the listening connection
        self._thread.join(wait)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except Exception as exc:  # a lost connection: poll meanwhile, then again
                dispatch.listened(False)
                if self._stop.is_set():
                    break
                if not self._failing:  # once per outage, not once a second
                    log.warning("queue wake-ups paused, polling meanwhile: %s", exc)
                self._failing = True
                self._stop.wait(1.0)
        dispatch.listened(False)

    def _listen(self) -> None:
        raw = self._sys_db.engine.raw_connection()
        raw.detach()  # never back to the pool: this connection only listens
        conn = raw.dbapi_connection
        try:
            conn.autocommit = True
            conn.execute(f"LISTEN {CHANNEL}")
            if self._failing:
                log.warning("queue wake-ups resumed")
                self._failing = False
            dispatch.listened(True)
            dispatch.ring_all()  # a run queued while nobody listened is looked for now
            while not self._stop.is_set():
                for note in conn.notifies(timeout=CHECK_SECONDS):  # none lost in between
                    if self._stop.is_set():
                        return
                    if note.payload:  # an empty one only wakes a thread that stops
                        dispatch.ring(note.payload)
                self._check_trigger()
        finally:
            dispatch.listened(False)
            conn.close()

    def _check_trigger(self) -> None:
        """Make the trigger again if it went; then look at the queues (a run queued
        while it was gone was announced to nobody). Raises if it cannot be made."""
        with self._sys_db.engine.connect() as c:
            if _exists(c, self._sys_db):
                return
        log.warning("the queue wake-up trigger was gone: making it again")
        if not install_trigger(self._sys_db):
            raise RuntimeError("the wake-up trigger is gone and could not be created")
        dispatch.ring_all()


_listener: Listener | None = None


def install(sys_db: Any) -> None:
    """Wake this process's queue threads by notification if ``sys_db`` (DBOS's running
    system database) is a PostgreSQL one and the trigger is there (made if missing)."""
    global _listener
    from dbos._sys_db_postgres import PostgresSystemDatabase

    if not isinstance(sys_db, PostgresSystemDatabase) or sys_db.sharded:
        return
    if getattr(sys_db, "_is_cockroach", False) or not install_trigger(sys_db):
        return
    uninstall()
    _listener = Listener(sys_db).start()


def uninstall() -> None:
    """Stop listening (at shutdown); the queue threads poll again."""
    global _listener
    if _listener is not None:
        listener, _listener = _listener, None
        listener.stop()
