"""The ``tether`` command line: ``demo`` runs an agent offline, ``lint`` checks tools,
``blast-radius`` says what a hijacked run can at worst do.

Errors are one line on stderr, never a traceback. Text that comes from the user, a
module or a model is printed as is: escaped for rich markup, with emoji codes off.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from tether.clients import ChatClient
from tether.errors import TetherError
from tether.events import Event, ModelRequest, RunFinished, ToolCallFinished, ToolCallStarted
from tether.tools import Tool, lint

HELP = "Run the offline support demo and the red team, check tools, serve the embedded model."
app = typer.Typer(add_completion=False, no_args_is_help=True, help=HELP)
console = Console(emoji=False, soft_wrap=True)  # a long line stays one line when piped
stderr = Console(stderr=True, emoji=False, highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` as one line on stderr and exit with ``code``."""
    stderr.print(f"[red]error:[/] {escape(message)}")
    raise typer.Exit(code)


def _print_event(event: Event) -> None:
    if isinstance(event, ModelRequest):
        console.print(f"[dim]turn {event.turn}: request with {event.messages} message(s)[/]")
    elif isinstance(event, ToolCallStarted):
        call = event.call
        console.print(f"  call [bold]{escape(call.name)}[/]({escape(call.arguments_json())})")
    elif isinstance(event, ToolCallFinished):
        style = "red" if event.result.is_error else "green"
        console.print(f"  [{style}]result[/] {escape(event.result.content[:200])}")
    elif isinstance(event, RunFinished):
        outcome = event.outcome
        console.print(f"[bold]outcome:[/] {outcome.kind} ({escape(outcome.reason)})")


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
        fail(str(exc))
    agent = demo_agent(client)
    agent.listeners.append(_print_event)
    result = asyncio.run(agent.run(prompt))
    if result.outcome.completed:
        console.print(f"\n[bold green]answer:[/] {escape(result.output or '')}")
    else:
        raise typer.Exit(1)


def _demo_client(spec: str | None) -> ChatClient:
    """The client for the demo; the embedded model (with its banner) unless told otherwise."""
    import os

    spec = spec or os.environ.get("TETHER_MODEL") or "local"
    if spec.strip() == "local":
        from tether.constrained import ConstrainedToolCalling
        from tether.providers.local import LocalClient, local_model_banner

        console.print(f"[yellow]{escape(local_model_banner())}[/]", highlight=False)
        local = LocalClient()
        local.load(say=lambda line: console.print(line, markup=False, highlight=False))
        return ConstrainedToolCalling(local)
    from tether.providers.registry import client_from_string

    return client_from_string(spec)


@app.command()
def redteam() -> None:
    """Run the red team: the built-in scenarios, then the suite of injected tasks with the
    default policy beside the old taint layer, then hold every run to its blast radius;
    exits non-zero when a target is missed or a run did what its report said it could not."""
    from tether.redteam import run_redteam
    from tether.redteam.radius import check_radius
    from tether.redteam.suite import run_suite_sync

    report = run_redteam()
    console.print(report.render(), markup=False, highlight=False)
    suite = run_suite_sync()
    console.print("\n" + suite.render(), markup=False, highlight=False)
    radius = asyncio.run(check_radius())
    console.print("\n" + radius.render(), markup=False, highlight=False)
    raise typer.Exit(0 if report.ok and suite.ok and radius.ok else 1)


@app.command("serve-local")
def serve_local_command(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free port).")
    ] = 8765,
) -> None:
    """Serve the embedded model over an OpenAI-compatible HTTP API (/v1/chat/completions)."""
    from tether.providers.local_server import serve_local

    try:
        serve_local(host, port)
    except TetherError as exc:
        fail(str(exc))


@app.command("state-key")
def state_key_command(
    key_id: Annotated[str, typer.Option("--id", help="The new key's id.")] = "",
) -> None:
    """Print a fresh run-state key as TETHER_STATE_KEYS text (put it in front of the keys
    in use to rotate them)."""
    from tether.state_seal import StateKeys

    typer.echo(StateKeys.generate(key_id or None).dumps())


@app.command("replay")
def replay_command(
    path: Annotated[str, typer.Argument(help="A cassette recorded by tether (JSON).")],
) -> None:
    """Replay a recorded run from its cassette alone and print its trace."""
    from tether.errors import ReplayDivergence
    from tether.replay import Cassette, replay_agent_run
    from tether.replay.trace import check_digests, is_agent_run, trace_lines

    try:
        cassette = Cassette.load(path)
        check_digests(cassette)
    except ReplayDivergence as exc:
        fail(str(exc), 1)
    except TetherError as exc:
        fail(str(exc))
    if not is_agent_run(cassette):  # a workflow's code is not in its cassette
        for line in trace_lines(cassette):
            console.print(line, markup=False, highlight=False)
        return
    try:
        result, replayer = asyncio.run(replay_agent_run(cassette, [_print_event]))
    except TetherError as exc:
        fail(str(exc), 1 if isinstance(exc, ReplayDivergence) else 2)
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        fail(f"{path} is a malformed cassette ({type(exc).__name__}); record it again")
    try:
        replayer.verify(result)
    except ReplayDivergence as exc:
        fail(str(exc), 1)
    if result.outcome.completed:
        console.print(f"answer: {result.output}", markup=False, highlight=False)
    console.print(f"replayed {replayer.turn} request(s): identical to the recording")


@app.command("lint")
def lint_command(
    target: Annotated[
        str,
        typer.Argument(
            help="MODULE:ATTRIBUTE naming a tool or a list of tools, e.g. tether.demo:read_order."
        ),
    ],
) -> None:
    """Flag tools with a thin description or undocumented parameters (one finding a line)."""
    tools = load_tools(target)
    findings = lint(tools)
    for f in findings:
        console.print(str(f), markup=False, highlight=False)
    n_errors = sum(f.severity == "error" for f in findings)
    console.print(
        f"{len(tools)} tool(s), {n_errors} error(s), {len(findings) - n_errors} hint(s)",
    )
    if n_errors:
        raise typer.Exit(1)


@app.command("blast-radius")
def blast_radius_command(
    target: Annotated[
        str,
        typer.Argument(
            help="MODULE:OBJECT naming an Agent, a tether.blast.Surface, a list of tools, or "
            "a dict of those, e.g. tether_desk.radius:REFUND."
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    check: Annotated[
        str | None,
        typer.Option(help="A baseline JSON report: exit 1 naming each way the radius grew."),
    ] = None,
) -> None:
    """Print what a fully hijacked run can at worst do, computed from the declarations."""
    from tether.blast.files import dump_reports, grown, load_reports, load_target, reports_of

    try:
        reports = reports_of(load_target(target), target)
    except ValueError as exc:
        fail(str(exc))
    text = dump_reports(reports) if as_json else "\n\n".join(r.render() for r in reports)
    console.print(text, markup=False, highlight=False, end="" if as_json else "\n")
    if check is not None:
        try:
            baseline = load_reports(check)
        except (OSError, ValueError) as exc:
            fail(f"cannot read the baseline {check}: {type(exc).__name__}; write it with --json")
        for line in (changes := grown(baseline, reports)):
            stderr.print(f"radius grew: {line}", markup=False)
        if changes:
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


def load_tools(target: str) -> list[Tool]:
    """The tools named by ``MODULE:ATTRIBUTE`` (a tool, or a list or dict of tools);
    anything else exits with a one-line error."""
    module_name, colon, path = target.strip().partition(":")
    if not colon or not module_name or not path:
        fail(f"{target!r} is not MODULE:ATTRIBUTE; write e.g. tether.demo:read_order")
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module raises on import
        hint = "; is the module on the path?" if isinstance(exc, ImportError) else ""
        fail(f"cannot load {target}: {type(exc).__name__}: {exc}{hint}")
    for name in path.split("."):
        try:
            value = getattr(value, name)
        except AttributeError:
            fail(f"cannot load {target}: {module_name} has no attribute {path!r}; check the name")
    if isinstance(value, Tool):
        return [value]
    items = value.values() if isinstance(value, Mapping) else value
    if isinstance(items, Iterable) and not isinstance(items, str | bytes):
        tools = list(items)
        strays = [t for t in tools if not isinstance(t, Tool)]
        if not strays:
            return tools
        fail(f"{target} holds {_kind(strays[0])}, not a tool; name a list of tools only")
    fail(f"{target} is {_kind(value)}, not a tool; name a @tool function or a list of tools")


def _kind(value: object) -> str:
    """A short description of what ``value`` is, for error messages."""
    if isinstance(value, type):
        return f"the class {value.__qualname__}"
    return f"a {type(value).__qualname__}"


def main() -> None:
    """Entry point of the ``tether`` script."""
    add_plugin_commands()
    app()
