"""The desk's commands, found by ``tether`` through the ``tether.commands`` entry points:
``tether serve`` (the web console) and ``tether desk demo`` (the terminal walk-through).

Only typer is imported here; the desk's dependencies load when a command runs, so a
``tether`` installed without the ``desk`` extra still starts and says what to install.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_DB = "tether-desk.db"
DB_HELP = "Database: a SQLite file path or URL, or postgresql://... (default: ./tether-desk.db)."
WORKERS_HELP = (
    "Worker processes serving the console (each loads the model and processes tickets); "
    "more than one needs a database other processes can open."
)
MODEL_HELP = (
    "Model spec: local (embedded, offline), scripted, anthropic:MODEL, openai:MODEL, "
    "openai-chat:MODEL@URL; default: $TETHER_MODEL, else local."
)

desk_app = typer.Typer(add_completion=False, no_args_is_help=True, help="The support desk.")


def _fail(message: str) -> typer.Exit:
    typer.secho(message, fg="red", err=True)
    return typer.Exit(2)


def _open(db_url: str, model: str | None) -> tuple[object, object, object, bool]:
    try:
        from tether.errors import TetherError
        from tether_desk.db import Database
        from tether_desk.models_cli import desk_client, desk_triage_client, resolve_spec
        from tether_desk.seed import seed
    except ImportError as exc:
        raise _fail(
            f"the desk's dependencies are missing ({exc.name}); install them with "
            "pip install 'tether[desk]'"
        ) from exc
    try:
        spec = resolve_spec(model)
        client = desk_client(spec, say=lambda s: typer.secho(s, fg="yellow"))
        triage = desk_triage_client(spec)
    except TetherError as exc:
        raise _fail(str(exc)) from exc
    db = Database(db_url)
    try:
        db.migrate()
    except Exception as exc:
        raise _fail(f"cannot open the database {db_url!r}: {type(exc).__name__}: {exc}") from exc
    return db, client, triage, seed(db)


def serve_command(
    db: Annotated[str, typer.Option("--db", help=DB_HELP)] = DEFAULT_DB,
    model: Annotated[str | None, typer.Option("--model", help=MODEL_HELP)] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, max=64, help=WORKERS_HELP)] = 1,
) -> None:
    """Serve the support desk's web console (creates, migrates and seeds the database on
    first start; reuses it afterwards)."""
    database, client, triage, seeded = _open(db, model)
    import uvicorn

    from tether_desk.pipeline import Desk
    from tether_desk.seed import ACCOUNTS
    from tether_desk.web.app import create_app

    desk = Desk(database, client, triage)  # type: ignore[arg-type]
    app = create_app(desk) if workers == 1 else None
    where = db if "://" in db else str(Path(db).resolve())
    typer.echo(f"database: {where} ({'created and seeded' if seeded else 'reused'})")
    typer.echo(f"console:  http://{host}:{port}/   (Ctrl-C stops it)")
    typer.echo("demo accounts:")
    for a in ACCOUNTS:
        typer.echo(f"  {a.role:8} {a.email:32} password {a.password}")
    try:
        if app is not None:
            config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
            uvicorn.Server(config).run()  # shuts down cleanly on Ctrl-C, then re-raises it
        else:
            _serve_workers(desk, model, host, port, workers)
    except KeyboardInterrupt:
        pass
    finally:
        database.dispose()  # type: ignore[attr-defined]
    typer.echo("stopped.")


def _serve_workers(desk: object, model: str | None, host: str, port: int, workers: int) -> None:
    """``workers`` uvicorn processes, each building its console from the environment; the
    secrets are made and decided runs recovered here first, once."""
    import os

    import uvicorn

    from tether_desk.decisions import recover_decided
    from tether_desk.models_cli import resolve_spec
    from tether_desk.pipeline import Desk
    from tether_desk.web.app import stored_secret
    from tether_desk.web.served import DB_ENV, MODEL_ENV

    assert isinstance(desk, Desk)
    for key in ("session_secret", "csrf_secret"):
        stored_secret(desk.db, key)
    asyncio.run(recover_decided(desk))
    os.environ[DB_ENV] = desk.db.url
    os.environ[MODEL_ENV] = resolve_spec(model)
    typer.echo(f"workers:  {workers} processes")
    uvicorn.run(
        "tether_desk.web.served:app_from_environment",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="warning",
        lifespan="on",
    )


@desk_app.command("serve")
def desk_serve(
    db: Annotated[str, typer.Option("--db", help=DB_HELP)] = DEFAULT_DB,
    model: Annotated[str | None, typer.Option("--model", help=MODEL_HELP)] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, max=64, help=WORKERS_HELP)] = 1,
) -> None:
    """Serve the web console (the same as tether serve)."""
    serve_command(db, model, host, port, workers)


@desk_app.command("demo")
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
