"""``tether desk demo``: the seeded tickets, end to end, in the terminal.

Each ticket is triaged and, for a refund, handled by the agent, with its trace printed as
it runs. A proposed refund is shown with the same information as the web approval screen
(the raw ticket with its instruction-like passages flagged, the amounts, where each value
came from, the friction) and decided in the terminal; drafts are shown and sent on request.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from tether.events import Event, ModelResponse, ToolCallFinished
from tether_desk.approvals import Screen, screen
from tether_desk.decisions import decide
from tether_desk.errors import DeskError
from tether_desk.pipeline import Desk, process_ticket
from tether_desk.tickets import draft_of, get_ticket, inbox, send_reply

Ask = Callable[[str], str]


def printer(console: Console) -> Callable[[Event], None]:
    """A run listener that prints model replies and tool results."""

    def show(event: Event) -> None:
        if isinstance(event, ModelResponse):
            for c in event.response.message.tool_calls:
                console.print(
                    f"  [dim]turn {event.turn}[/] call [bold]{c.name}[/]({c.arguments_json()})",
                    highlight=False,
                )
            if event.response.message.text and not event.response.message.tool_calls:
                console.print(f"  [dim]turn {event.turn}[/] answer", highlight=False)
        elif isinstance(event, ToolCallFinished):
            style = "red" if event.result.is_error else "green"
            console.print(
                f"    [{style}]->[/] {event.result.content[:160]}", markup=True, highlight=False
            )

    return show


def render_screen(console: Console, sc: Screen) -> None:
    """The approval screen, in the terminal."""
    amount = sc.money(sc.amount_cents)
    console.rule(f"[bold]Refund {amount} EUR on {sc.order.number}?[/] (proposal #{sc.approval_id})")
    expires = f"{sc.expires_at:%Y-%m-%d %H:%M} UTC"
    console.print(
        f"Ticket #{sc.ticket_id} from {sc.customer}: {sc.subject!r}; expires at {expires}"
    )
    money = Table(show_header=False, box=None)
    money.add_row("This refund", f"[bold]{sc.money(sc.amount_cents)} EUR[/]")
    money.add_row("Paid for the order", f"{sc.money(sc.order.paid_cents)} EUR")
    money.add_row("Already refunded", f"{sc.money(sc.order.refunded_cents)} EUR")
    money.add_row(
        "Refunded after", f"{sc.money(sc.after_cents)} of {sc.money(sc.order.paid_cents)} EUR"
    )
    console.print(money)
    origins = Table("argument", "value", "came from", box=None)
    for o in sc.origins:
        origins.add_row(o.argument, o.value, f"[yellow]{o.origin}[/]" if o.risky else o.origin)
    console.print(origins)
    console.print("[bold]The customer's ticket, as written (third party, unverified):[/]")
    text = Text()
    for seg in sc.text:
        text.append(seg.text, style="black on yellow" if seg.reasons else "")
    console.print(text)
    for n, f in enumerate(sc.flags, 1):
        console.print(f"  [yellow]{n}.[/] {f.text!r}: {f.reason}", highlight=False)
    if sc.friction:
        console.print(
            f"[yellow]Type the amount to approve, because {' and '.join(sc.friction)}.[/]"
        )


async def decide_in_terminal(
    desk: Desk, console: Console, sc: Screen, staff_id: int, ask: Ask
) -> None:
    """Ask the person at the terminal, until a decision is taken."""
    while True:
        answer = ask("Approve this refund? [y/N] ").strip().lower()
        approve = answer in {"y", "yes", "o", "oui"}
        typed = (
            ask(f"Type {sc.money(sc.amount_cents)} to confirm: ")
            if approve and sc.typed_amount_required
            else ""
        )
        reason = "" if approve else ask("Reason (for the agent): ")
        try:
            status = await decide(
                desk, sc.approval_id, staff_id, approve=approve, typed_amount=typed, reason=reason
            )
        except DeskError as exc:
            console.print(f"[red]{exc}[/]")
            continue
        console.print(f"[bold]{'approved' if approve else 'denied'}[/]; ticket is now {status}")
        return


async def run_demo(desk: Desk, console: Console, staff_id: int, ask: Ask) -> None:
    """Walk through every new ticket of the desk."""
    desk.listeners.append(printer(console))
    tickets = [r for r in reversed(inbox(desk.db, 1, "new").rows)]
    if not tickets:
        console.print("No new ticket to handle.")
    for row in tickets:
        console.rule(f"Ticket #{row.id} on {row.order} from {row.customer}: {row.subject!r}")
        status = await process_ticket(desk, row.id)
        ticket = get_ticket(desk.db, row.id)
        console.print(f"triage: [bold]{ticket.category}[/] -> {status}")
        from tether_desk.approvals import ticket_approvals

        for a in ticket_approvals(desk.db, row.id):
            if a.status == "pending":
                sc = screen(desk.db, a.id, desk.detector)
                render_screen(console, sc)
                await decide_in_terminal(desk, console, sc, staff_id, ask)
        ticket = get_ticket(desk.db, row.id)
        if ticket.reply:
            console.print(f"[green]reply sent:[/] {ticket.reply}", highlight=False)
            continue
        draft = draft_of(desk.db, row.id)
        if draft is None:
            console.print("[yellow]No draft: a person takes this ticket in the console.[/]")
            continue
        console.print(f"[bold]draft by the {draft.author}:[/] {draft.body}", highlight=False)
        if ask("Send this draft to the customer? [y/N] ").strip().lower() in {
            "y",
            "yes",
            "o",
            "oui",
        }:
            send_reply(desk.db, row.id, staff_id)
            console.print("[green]sent[/]")
