"""The ``tether`` command line: ``demo`` runs an agent offline, ``lint`` checks tools."""

from __future__ import annotations

import asyncio
import importlib
from typing import Annotated

import typer
from rich.console import Console

from tether.clients import ChatClient
from tether.errors import TetherError
from tether.events import Event, ModelRequest, RunFinished, ToolCallFinished, ToolCallStarted
from tether.tools import Tool, lint

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()


def _print_event(event: Event) -> None:
    if isinstance(event, ModelRequest):
        console.print(f"[dim]turn {event.turn}: request with {event.messages} message(s)[/]")
    elif isinstance(event, ToolCallStarted):
        console.print(f"  call [bold]{event.call.name}[/]({event.call.arguments_json()})")
    elif isinstance(event, ToolCallFinished):
        style = "red" if event.result.is_error else "green"
        console.print(f"  [{style}]result[/] {event.result.content[:200]}")
    elif isinstance(event, RunFinished):
        console.print(f"[bold]outcome:[/] {event.outcome.kind} ({event.outcome.reason})")


@app.command()
def demo(
    prompt: Annotated[str, typer.Argument(help="The customer's question.")] = (
        "Ou en est ma commande C-1042 ?"
    ),
    model: Annotated[
        str | None,
        typer.Option(
            help="Model spec (anthropic:MODEL, openai:MODEL, openai-chat:MODEL@URL, "
            "local); default: $TETHER_MODEL, else the embedded offline model."
        ),
    ] = None,
    scripted: Annotated[
        bool, typer.Option("--scripted", help="Use a scripted model instead of a real one.")
    ] = False,
) -> None:
    """Run the support demo: an agent reads an order and answers, offline by default."""
    from tether.demo import demo_agent

    try:
        client = None if scripted else _demo_client(model)
    except TetherError as exc:
        console.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc
    agent = demo_agent(client)
    agent.listeners.append(_print_event)
    result = asyncio.run(agent.run(prompt))
    if result.outcome.completed:
        console.print(f"\n[bold green]answer:[/] {result.output}")
    else:
        raise typer.Exit(1)


def _demo_client(spec: str | None) -> ChatClient:
    """The client for the demo; the embedded model (with its banner) unless told otherwise."""
    import os

    spec = spec or os.environ.get("TETHER_MODEL") or "local"
    if spec.strip() == "local":
        from tether.providers.local import demo_client, local_model_banner

        console.print(f"[yellow]{local_model_banner()}[/]", highlight=False)
        return demo_client()
    from tether.providers.registry import client_from_string

    return client_from_string(spec)


@app.command()
def redteam() -> None:
    """Run the built-in red-team scenarios with an obedient, hijacked model."""
    from tether.redteam import run_redteam

    report = run_redteam()
    console.print(report.render(), markup=False, highlight=False)
    raise typer.Exit(0 if report.ok else 1)


@app.command("serve-local")
def serve_local_command(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
) -> None:
    """Serve the embedded model over an OpenAI-compatible HTTP API (/v1/chat/completions)."""
    from tether.providers.local_server import serve_local

    serve_local(host, port)


@app.command("lint")
def lint_command(
    target: Annotated[str, typer.Argument(help="module:attribute naming a tool or a list.")],
) -> None:
    """Flag tools with a thin description or undocumented parameters."""
    module_name, _, attr = target.partition(":")
    try:
        value = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        console.print(f"[red]cannot load {target}: {exc}[/]")
        raise typer.Exit(2) from exc
    tools = [value] if isinstance(value, Tool) else list(value)
    findings = lint(tools)
    for f in findings:
        console.print(str(f), markup=False)
    errors = [f for f in findings if f.severity == "error"]
    console.print(
        f"{len(tools)} tool(s), {len(errors)} error(s), {len(findings) - len(errors)} hint(s)"
    )
    if errors:
        raise typer.Exit(1)


def add_plugin_commands() -> None:
    """Add the commands other packages register under the ``tether.commands`` entry-point
    group (the support desk adds ``serve`` and ``desk``): a typer app becomes a command
    group, a function a command. The runtime never imports them itself."""
    from importlib.metadata import entry_points

    known = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    for ep in entry_points(group="tether.commands"):
        if ep.name in known:
            continue
        try:
            target = ep.load()
        except Exception as exc:  # a broken plugin must not break the runtime's commands
            console.print(f"[yellow]command {ep.name!r} unavailable: {exc}[/]")
            continue
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=ep.name)
        else:
            app.command(ep.name)(target)
        known.add(ep.name)


def main() -> None:
    """Entry point of the ``tether`` script."""
    add_plugin_commands()
    app()
