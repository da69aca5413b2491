"""Saved replies: texts staff reuse, with placeholders filled from the ticket's order.

Placeholders: ``{customer}``, ``{order}``, ``{status}``, ``{paid}``, ``{refunded}``,
``{remaining}`` (euros). An unknown placeholder stays as written, so the draft check
(:mod:`tether_desk.draft_quality`) flags it.
"""

from __future__ import annotations

import re

from sqlalchemy import select

from tether_desk.db import Database
from tether_desk.errors import InvalidInput, NotFound
from tether_desk.models import Customer, SavedReply, Ticket
from tether_desk.money import format_cents
from tether_desk.orders import order_view
from tether_desk.tickets import MAX_BODY, clean_text

DEFAULTS = (
    (
        "Refund made",
        "Bonjour {customer}, nous avons rembourse {refunded} EUR sur votre commande {order} "
        "(payee {paid} EUR). Le remboursement apparaitra sous quelques jours.",
    ),
    (
        "Order status",
        "Bonjour {customer}, votre commande {order} est actuellement : {status}.",
    ),
)


_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def saved_replies(db: Database) -> list[SavedReply]:
    """Every saved reply, by title (the defaults are added the first time)."""
    with db.write() as s:
        rows = list(s.scalars(select(SavedReply).order_by(SavedReply.title)))
        if not rows:
            for title, body in DEFAULTS:
                s.add(SavedReply(title=title, body=body))
            s.flush()
            rows = list(s.scalars(select(SavedReply).order_by(SavedReply.title)))
        for r in rows:
            s.expunge(r)
        return rows


def add_saved_reply(db: Database, title: str, body: str) -> int:
    """Save a reply for reuse; its id."""
    title = clean_text(title, "title", 100)
    body = clean_text(body, "reply", MAX_BODY)
    with db.write() as s:
        if s.scalar(select(SavedReply.id).where(SavedReply.title == title)) is not None:
            raise InvalidInput(f'A saved reply is already called "{title}"; pick another title.')
        reply = SavedReply(title=title, body=body)
        s.add(reply)
        s.flush()
        return reply.id


def filled(db: Database, reply_id: int, ticket_id: int) -> str:
    """The saved reply ``reply_id`` with the facts of the ticket's order filled in."""
    with db.read() as s:
        reply = s.get(SavedReply, reply_id)
        ticket = s.get(Ticket, ticket_id)
        if reply is None or ticket is None:
            raise NotFound("There is no such saved reply or ticket.")
        customer = s.get(Customer, ticket.customer_id)
        view = order_view(s, ticket.order_id)
        facts = dict(
            customer=customer.name if customer else "",
            order=view.number,
            status=view.status,
            paid=format_cents(view.paid_cents),
            refunded=format_cents(view.refunded_cents),
            remaining=format_cents(view.remaining_cents),
        )
        body = reply.body
    return _PLACEHOLDER.sub(lambda m: facts.get(m.group(1), m.group(0)), body)
