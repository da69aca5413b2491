"""The desk's commands, found by ``tether`` through the ``tether.commands`` entry points:
``tether serve`` (the web console), ``tether worker`` (a durable worker taking tickets from
the queue) and ``tether desk demo`` (the terminal walk-through).

Only typer is imported here; the desk's dependencies load when a command runs, so a
``tether`` installed without the ``desk`` extra still starts and says what to install.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

import typer

P = ParamSpec("P")
R = TypeVar("R")

if TYPE_CHECKING:
    from tether_desk.durable import DurableDesk
    from tether_desk.pipeline import Desk

DEFAULT_DB = "tether-desk.db"
DB_HELP = "Database: a SQLite file path or URL, or postgresql://... (default: ./tether-desk.db)."
WORKERS_HELP = (
    "Processes serving the console; durable, the tickets still run in this process alone "
    "(or in `tether worker` processes, with --no-process); with --plain each worker "
    "processes tickets and loads the model. More than one needs a database other "
    "processes can open."
)
MODEL_HELP = (
    "Model spec: local (embedded, offline), scripted, anthropic:MODEL, openai:MODEL, "
    "openai-chat:MODEL@URL; default: $TETHER_MODEL, else local."
)

PROCESS_HELP = (
    "Run tickets in this process too (default); --no-process leaves them to `tether worker` "
    "processes sharing the database's queue."
)
PLAIN_HELP = (
    "Run tickets in the web process without the durable log (no queue, no recovery of a "
    "run cut short)."
)
ID_HELP = (
    "This process's executor id, unique among the processes that run tickets; restarted "
    "under the same id, it resumes the runs it left."
)

desk_app = typer.Typer(add_completion=False, no_args_is_help=True, help="The support desk.")


def _fail(message: str) -> typer.Exit:
    typer.secho(message, fg="red", err=True)
    return typer.Exit(2)


def _open(
    db_url: str, model: str | None, *, seed_it: bool = True, need_model: bool = True
) -> tuple[object, object, object, bool]:
    """The database (created, migrated, seeded unless not ``seed_it``), the desk's client
    and its triage client for ``model`` (none loaded unless ``need_model``), and whether
    the database was seeded now."""
    try:
        from tether.errors import TetherError
        from tether_desk.db import Database
        from tether_desk.models_cli import desk_client, desk_triage_client, resolve_spec
        from tether_desk.operations.checks import check_database, shown
        from tether_desk.seed import seed
    except ImportError as exc:
        raise _fail(
            f"the desk's dependencies are missing ({exc.name}); install them with "
            "pip install 'tether[desk]'"
        ) from exc
    try:
        check_database(db_url)
        if need_model:
            spec = resolve_spec(model)
            client = desk_client(spec, say=lambda s: typer.secho(s, fg="yellow"))
            triage = desk_triage_client(spec)
        else:
            from tether_desk.web.served import NoModel

            client, triage = NoModel(), None
    except TetherError as exc:
        raise _fail(str(exc)) from exc
    try:
        db = Database(db_url)
        db.migrate()
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise _fail(f"cannot open the database {shown(db_url)!r}: {shown(reason)}") from exc
    return db, client, triage, seed(db) if seed_it else False


SMTP_HELP = "Send notifications through this SMTP server, HOST:PORT (default: keep them queued)."
PRINT_MAIL_HELP = "Print notifications on the terminal instead of sending them."


def _mailer(smtp: str | None, print_mail: bool) -> Any:
    """The notifications' mailer the options ask for, or ``None``."""
    from tether_desk.notify import PrintMailer, SmtpMailer

    if print_mail:
        return PrintMailer()
    if smtp:
        host, _, port = smtp.rpartition(":")
        if not host or not port.isdigit():
            raise typer.BadParameter("write the SMTP server as HOST:PORT, like 127.0.0.1:1025")
        return SmtpMailer(host, int(port))
    return None


def _state_key_place(database: object) -> str:
    """Where the key sealing the run states comes from, for the start-up lines."""
    from tether.state_seal import KEYS_ENV
    from tether_desk.state_keys import key_file

    if os.environ.get(KEYS_ENV):
        return f"the keys in ${KEYS_ENV}"
    path = key_file(database.url)  # type: ignore[attr-defined]
    return f"the key in {path}" if path else "a key of this process alone"


def _writer_lock(db_url: str) -> object:
    """The SQLite desk's single-writer lock, held by this process (see
    :mod:`tether_desk.operations.single_writer`)."""
    from tether.errors import ConfigError
    from tether_desk.db import normalise_url
    from tether_desk.operations.checks import check_database
    from tether_desk.operations.single_writer import hold_writer_lock

    try:
        check_database(db_url)
        return hold_writer_lock(normalise_url(db_url))
    except ConfigError as exc:
        raise _fail(str(exc)) from exc


def _checked_id(worker_id: str) -> str:
    from tether.errors import ConfigError
    from tether_desk.operations.checks import check_executor_id

    try:
        return check_executor_id(worker_id)
    except ConfigError as exc:
        raise _fail(str(exc)) from exc


class _Stopped(KeyboardInterrupt):
    """SIGTERM, stopping a command as Ctrl-C does (cleanly, exit status 0)."""


def _stops_on_sigterm(command: Callable[P, R]) -> Callable[P, R]:
    """``command`` with SIGTERM stopping it as Ctrl-C does; the handler from before is back
    once it returns (a command run inside another program, a test, leaves none behind)."""
    import functools
    import signal

    def stop(_sig: int, _frame: object) -> None:
        raise _Stopped

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        before = signal.signal(signal.SIGTERM, stop)
        try:
            return command(*args, **kwargs)
        finally:
            signal.signal(signal.SIGTERM, before)

    return run


@_stops_on_sigterm
def serve_command(
    db: Annotated[str, typer.Option("--db", help=DB_HELP)] = DEFAULT_DB,
    model: Annotated[str | None, typer.Option("--model", help=MODEL_HELP)] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, max=64, help=WORKERS_HELP)] = 1,
    process: Annotated[bool, typer.Option("--process/--no-process", help=PROCESS_HELP)] = True,
    plain: Annotated[bool, typer.Option("--plain", help=PLAIN_HELP)] = False,
    worker_id: Annotated[str, typer.Option("--id", help=ID_HELP)] = "local",
    smtp: Annotated[str | None, typer.Option("--smtp", help=SMTP_HELP)] = None,
    print_mail: Annotated[bool, typer.Option("--print-mail", help=PRINT_MAIL_HELP)] = False,
) -> None:
    """Serve the support desk's web console (creates, migrates and seeds the database on
    first start; reuses it afterwards).

    Tickets run as durable workflows: one cut short by a crash resumes at the next start.
    With --workers N, N processes serve the console and the tickets run in this one."""
    worker_id = _checked_id(worker_id)
    console_only = process is False and not plain
    lock = None if console_only else _writer_lock(db)
    database, client, triage, seeded = _open(db, model, need_model=not console_only)
    import uvicorn

    from tether_desk.pipeline import Desk
    from tether_desk.seed import ACCOUNTS
    from tether_desk.web.app import create_app

    desk = Desk(database, client, triage)  # type: ignore[arg-type]
    desk.mailer = _mailer(smtp, print_mail)
    runs = "plain: tickets run in this process" if workers == 1 else "plain: in each worker"
    if not plain:
        durable = _durable(desk, worker_id, process)
        runs = _runs_line(durable)
        _upgrade_notice(durable, db)
    from tether_desk.operations.checks import shown
    from tether_desk.web.settings import WebSettings

    app = create_app(desk, settings=WebSettings.from_env(os.environ)) if workers == 1 else None
    where = shown(db) if "://" in db else str(Path(db).resolve())
    typer.echo(f"database: {where} ({'created and seeded' if seeded else 'reused'})")
    typer.echo(f"states:   sealed with {_state_key_place(database)}")
    typer.echo(f"runs:     {runs}")
    typer.echo(f"console:  http://{host}:{port}/   (Ctrl-C stops it)")
    typer.echo("demo accounts:")
    for a in ACCOUNTS:
        typer.echo(f"  {a.role:8} {a.email:32} password {a.password}")
    try:
        if app is not None:
            config = uvicorn.Config(
                app,
                host=host,
                port=port,
                log_level="warning",
                access_log=False,  # info lines, never shown at warning: not even formatted
                lifespan="on",
                proxy_headers=False,
            )  # forwarded headers: only from TETHER_DESK_TRUSTED_PROXIES (the app reads them)
            import gc
            import sys

            gc.collect()
            gc.freeze()  # modules and start-up objects: full collections skip them (short pauses)
            sys.setswitchinterval(0.001)  # a page waits less for the GIL behind a workflow
            uvicorn.Server(config).run()  # shuts down cleanly on Ctrl-C, then re-raises it
        else:
            from tether_desk.models_cli import resolve_spec
            from tether_desk.web.served import serve_workers

            typer.echo(f"workers:  {workers} processes serve the console")
            spec = "scripted" if console_only else resolve_spec(model)
            serve_workers(desk, spec, host, port, workers)
    except KeyboardInterrupt:
        pass
    finally:
        database.dispose()  # type: ignore[attr-defined]
        if lock is not None:
            lock.release()  # type: ignore[attr-defined]
    if plain or not process:
        typer.echo("stopped.")
    else:
        typer.echo("stopped. Tickets in progress stay pending and resume at the next start.")


def _durable(desk: Desk, worker_id: str, process: bool, **settings: Any) -> DurableDesk:
    """Make ``desk`` durable (``desk.runs``)."""
    try:
        from tether_desk.durable import DurableDesk, DurableSettings
    except ImportError as exc:
        raise _fail(
            f"durable runs need DBOS ({exc.name}); install it with pip install "
            "'tether[durable]', or pass --plain"
        ) from exc
    from tether.errors import ConfigError

    try:
        return DurableDesk(
            desk, DurableSettings(executor_id=worker_id, **settings), process=process
        )
    except ConfigError as exc:
        raise _fail(str(exc)) from exc


def _runs_line(runs: DurableDesk) -> str:
    who = f"worker {runs.settings.executor_id!r}" if runs.process else "`tether worker` processes"
    return f"durable, logged in {_hide_password(runs.url)}, run by {who}"


def _upgrade_notice(runs: DurableDesk, db: str) -> None:
    """Say in one line each if runs of another version, or of an executor that is gone,
    wait in the log (see :mod:`tether_desk.operations.upgrade`)."""
    from tether_desk.operations.checks import shown
    from tether_desk.operations.upgrade import start_notices

    s = runs.settings
    me = s.executor_id if runs.process else ""
    for line in start_notices(runs.url, runs.desk.db, s.application_version, me, shown(db)):
        typer.secho(line, fg="yellow")


def _hide_password(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


@_stops_on_sigterm
def worker_command(
    worker_id: Annotated[str, typer.Option("--id", help=ID_HELP)],
    db: Annotated[str, typer.Option("--db", help=DB_HELP)] = DEFAULT_DB,
    model: Annotated[str | None, typer.Option("--model", help=MODEL_HELP)] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Tickets run at a time (waiting approvals do not count).")
    ] = 8,
    recover: Annotated[
        list[str] | None,
        typer.Option(
            "--recover",
            help="Take over the pending runs of this executor id, a worker gone for good "
            "(never one still running). Repeatable.",
        ),
    ] = None,
    poll: Annotated[
        float, typer.Option(min=0.01, help="Seconds between two looks at the queue.")
    ] = 1.0,
) -> None:
    """Run a durable worker: take the desk's tickets from the queue until Ctrl-C.

    Several workers share one PostgreSQL database. A killed worker's runs resume when it
    restarts under the same --id, or on another worker started with --recover ID."""
    worker_id = _checked_id(worker_id)
    lock = _writer_lock(db)
    database, client, triage, _ = _open(db, model, seed_it=False)
    from tether_desk.pipeline import Desk

    runs = _durable(
        Desk(database, client, triage),  # type: ignore[arg-type]
        worker_id,
        True,
        concurrency=concurrency,
        poll_seconds=poll,
        log_on_loop=True,  # the worker's loop runs only workflows: no thread hop per log write
    )
    typer.echo(f"runs:     {_runs_line(runs)}")
    _upgrade_notice(runs, db)
    try:
        asyncio.run(_work(runs, recover or []))
    except KeyboardInterrupt:
        pass
    finally:
        database.dispose()  # type: ignore[attr-defined]
        if lock is not None:
            lock.release()  # type: ignore[attr-defined]
    typer.echo(
        f"stopped. Its runs in progress resume when it restarts with --id {worker_id}, "
        f"or on a worker started with --recover {worker_id}."
    )


async def _work(runs: DurableDesk, recover: list[str]) -> None:
    import signal

    from tether_desk.durable.worker import run_worker

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await run_worker(runs, stop, recover=recover, say=typer.echo)


@desk_app.command("serve")
def desk_serve(
    db: Annotated[str, typer.Option("--db", help=DB_HELP)] = DEFAULT_DB,
    model: Annotated[str | None, typer.Option("--model", help=MODEL_HELP)] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, max=64, help=WORKERS_HELP)] = 1,
    process: Annotated[bool, typer.Option("--process/--no-process", help=PROCESS_HELP)] = True,
    plain: Annotated[bool, typer.Option("--plain", help=PLAIN_HELP)] = False,
    worker_id: Annotated[str, typer.Option("--id", help=ID_HELP)] = "local",
) -> None:
    """Serve the web console (the same as tether serve)."""
    serve_command(db, model, host, port, workers, process, plain, worker_id)


@desk_app.command("demo")
@_stops_on_sigterm
def desk_demo(
    db: Annotated[
        str, typer.Option("--db", help="Database (default: a fresh temporary file).")
    ] = "",
    model: Annotated[str | None, typer.Option("--model", help=MODEL_HELP)] = None,
) -> None:
    """Walk through the seeded tickets in the terminal, the injected one included, with
    approvals asked here and the same information as the web approval screen."""
    import tempfile

    from rich.console import Console
    from sqlalchemy import select

    with tempfile.TemporaryDirectory(prefix="tether-desk-") as tmp:
        database, client, triage, _ = _open(db or str(Path(tmp) / "demo.db"), model)
        from tether_desk.demo import run_demo
        from tether_desk.models import Staff
        from tether_desk.pipeline import Desk

        with database.read() as s:  # type: ignore[attr-defined]
            staff_id = s.scalar(select(Staff.id))
        console = Console()
        try:
            desk = Desk(database, client, triage)  # type: ignore[arg-type]
            asyncio.run(run_demo(desk, console, int(staff_id), console.input))
        except (KeyboardInterrupt, EOFError):
            console.print("\nstopped.")
        finally:
            database.dispose()  # type: ignore[attr-defined]
