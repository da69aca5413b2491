"""``tether runs``: the operator's view of the desk's durable runs, and its actions
(:mod:`tether_desk.operations.runs`), from a terminal. It reads the durable log through a
DBOS client: it runs no ticket and takes no lock, beside a running desk or without one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

DB_HELP = "The desk's database: a SQLite file path or URL, or postgresql://..."
runs_app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="The desk's durable runs, for operators."
)
DbOption = Annotated[str, typer.Option("--db", help=DB_HELP)]


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", fg="red", err=True)
    return typer.Exit(2)


@contextmanager
def _opened(db_url: str) -> Iterator[tuple[Any, Any, str]]:
    """The desk's database, a DBOS client on its durable log, and this code's version."""
    from dbos import DBOS, DBOSClient

    from tether.errors import ConfigError
    from tether_desk.db import Database
    from tether_desk.durable import APP_NAME, APP_VERSION, system_database_url
    from tether_desk.operations.checks import check_database, shown

    try:
        check_database(db_url)
    except ConfigError as exc:
        raise _fail(str(exc)) from exc
    db = Database(db_url)
    try:
        log = system_database_url(db.url)
        DBOS.migrate(log)  # as a console does: the log's tables exist from then on
        client = DBOSClient(system_database_url=log, application_name=APP_NAME)
    except Exception as exc:
        db.dispose()
        raise _fail(f"cannot open the durable log of {shown(db_url)!r}: {exc}") from exc
    try:
        yield db, client, APP_VERSION
    except ConfigError as exc:
        raise _fail(str(exc)) from exc
    finally:
        client.destroy()
        db.dispose()


@runs_app.command("list")
def list_command(
    db: DbOption = "tether-desk.db",
    done: Annotated[bool, typer.Option("--done", help="Finished runs too.")] = False,
) -> None:
    """Every run not done, oldest first: state, age, ticket, executor, version; those that
    need attention are marked with !, and say what unblocks them."""
    from tether_desk.operations.runs import list_runs

    with _opened(db) as (database, client, version):
        rows = list_runs(client, database, version, done=done)
    if not rows:
        typer.echo("no runs in progress.")
        return
    for r in rows:
        mark = "!" if r.needs_attention else " "
        ticket = f"ticket {r.ticket_id}" if r.ticket_id is not None else "no ticket"
        typer.echo(
            f"{mark} {r.workflow_id}  {r.words}  {r.age()}  {ticket}  "
            f"executor {r.executor_id or '-'}  version {r.version}"
        )
        if r.needs_attention:
            typer.echo(f"    -> {r.action}" + (f"  ({r.error})" if r.error else ""))
    attention = sum(r.needs_attention for r in rows)
    typer.echo(f"{len(rows)} run(s), {attention} needing attention.")


@runs_app.command("show")
def show_command(
    workflow_id: Annotated[str, typer.Argument(help="The run's workflow id.")],
    db: DbOption = "tether-desk.db",
) -> None:
    """One run: its state, error and logged steps."""
    from tether_desk.operations.runs import get_run, steps

    with _opened(db) as (database, client, version):
        r = get_run(client, database, workflow_id, version)
        logged = steps(client, workflow_id)
    typer.echo(f"{r.workflow_id}: {r.words} ({r.status}), {r.kind} of ticket {r.ticket_id}")
    typer.echo(f"executor {r.executor_id or '-'}, version {r.version}, started {r.age()} ago")
    if r.error:
        typer.echo(f"error: {r.error}")
    if r.action:
        typer.echo(f"what to do: {r.action}")
    for s in logged:
        typer.echo(
            f"  step {s['step']:3}  {s['name']}" + (f"  ERROR {s['error']}" if s["error"] else "")
        )


@runs_app.command("retry")
def retry_command(
    workflow_ids: Annotated[
        list[str] | None, typer.Argument(help="Workflow ids of runs to retry.")
    ] = None,
    db: DbOption = "tether-desk.db",
    stranded: Annotated[
        bool, typer.Option("--stranded", help="Every run stranded by a version change.")
    ] = False,
) -> None:
    """Run stopped, stranded or orphaned runs again, from their last completed step where
    DBOS can, else from the start (same run ids, same idempotency keys)."""
    from tether_desk.operations.runs import list_runs, retry

    with _opened(db) as (database, client, version):
        ids = list(workflow_ids or [])
        if stranded:
            rows = list_runs(client, database, version)
            ids += [r.workflow_id for r in rows if r.state == "stranded"]
        if not ids:
            typer.echo("no run to retry.")
        for wid in ids:
            typer.echo(retry(client, database, wid, version))


@runs_app.command("fail")
def fail_command(
    workflow_ids: Annotated[list[str], typer.Argument(help="Workflow ids of runs to stop.")],
    db: DbOption = "tether-desk.db",
) -> None:
    """Stop runs for good and hand their tickets to an advisor."""
    from tether_desk.operations.runs import fail

    with _opened(db) as (database, client, version):
        for wid in workflow_ids:
            typer.echo(fail(client, database, wid, version))


@runs_app.command("recover")
def recover_command(
    executor_ids: Annotated[list[str], typer.Argument(help="Executor ids of dead workers.")],
    db: DbOption = "tether-desk.db",
    force: Annotated[
        bool, typer.Option("--force", help="Even an executor whose heartbeat is fresh.")
    ] = False,
) -> None:
    """Hand the pending runs of dead workers to the live ones."""
    from tether_desk.operations.runs import recover

    with _opened(db) as (database, client, version):
        taken = recover(client, database, executor_ids, version, force=force)
    typer.echo(f"handed {len(taken)} run(s) of {', '.join(executor_ids)} to the live workers")


@runs_app.command("operator")
def operator_command(
    email: Annotated[str, typer.Argument(help="A staff account's e-mail.")],
    db: DbOption = "tether-desk.db",
    remove: Annotated[bool, typer.Option("--remove", help="Take the role away.")] = False,
) -> None:
    """Give a staff account the operator role (the console's runs page), or take it away."""
    from tether.errors import ConfigError
    from tether_desk.db import Database
    from tether_desk.operations.checks import check_database
    from tether_desk.operations.roles import set_operator

    try:
        check_database(db)
        database = Database(db)
        try:
            set_operator(database, email, not remove)
        finally:
            database.dispose()
    except ConfigError as exc:
        raise _fail(str(exc)) from exc
    typer.echo(f"{email} is {'no longer ' if remove else ''}an operator.")
