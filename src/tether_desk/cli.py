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
) -> None:
    """Serve the support desk's web console (creates, migrates and seeds the database on
    first start; reuses it afterwards)."""
    database, client, triage, seeded = _open(db, model)
    import uvicorn

    from tether_desk.pipeline import Desk
    from tether_desk.seed import ACCOUNTS
    from tether_desk.web.app import create_app

    app = create_app(Desk(database, client, triage))  # type: ignore[arg-type]
    where = db if "://" in db else str(Path(db).resolve())
    typer.echo(f"database: {where} ({'created and seeded' if seeded else 'reused'})")
    typer.echo(f"console:  http://{host}:{port}/   (Ctrl-C stops it)")
    typer.echo("demo accounts:")
    for a in ACCOUNTS:
        typer.echo(f"  {a.role:8} {a.email:32} password {a.password}")
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    try:
        uvicorn.Server(config).run()  # shuts down cleanly on Ctrl-C, then re-raises it
    except KeyboardInterrupt:
        pass
    finally:
        database.dispose()  # type: ignore[attr-defined]
    typer.echo("stopped.")


@desk_app.command("serve")
def desk_serve(
    db: Annotated[str, typer.Option("--db", help=DB_HELP)] = DEFAULT_DB,
    model: Annotated[str | None, typer.Option("--model", help=MODEL_HELP)] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
) -> None:
    """Serve the web console (the same as tether serve)."""
    serve_command(db, model, host, port)


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
