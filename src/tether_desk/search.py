"""Search across tickets and their messages, one interface on SQLite and PostgreSQL.

SQLite: the FTS5 tables ``messages_fts`` and ``tickets_fts`` (migration 0005, kept by
triggers). PostgreSQL: ``to_tsvector('simple', ...)`` under GIN indexes. Both match every
word of the query as a prefix ("rembours" finds "remboursement"), newest tickets first.
Only staff search: notes and drafts are found too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text

from tether_desk.db import Database

MAX_HITS = 50
MAX_WORDS = 8
_WORD = re.compile(r"\w+")
_SQLITE = text(
    """SELECT ticket_id, max(hit) FROM (
        SELECT m.ticket_id AS ticket_id, m.id AS hit FROM messages_fts
            JOIN messages m ON m.id = messages_fts.rowid WHERE messages_fts MATCH :q
        UNION ALL
        SELECT rowid AS ticket_id, 0 AS hit FROM tickets_fts WHERE tickets_fts MATCH :q
    ) GROUP BY ticket_id ORDER BY ticket_id DESC LIMIT :n"""
)
_POSTGRESQL = text(
    """SELECT ticket_id, max(hit) FROM (
        SELECT ticket_id, id AS hit FROM messages
            WHERE to_tsvector('simple', body) @@ to_tsquery('simple', :q)
        UNION ALL
        SELECT id AS ticket_id, 0 AS hit FROM tickets
            WHERE to_tsvector('simple', subject) @@ to_tsquery('simple', :q)
    ) found GROUP BY ticket_id ORDER BY ticket_id DESC LIMIT :n"""
)
_ROWS = text(
    """SELECT t.id, t.subject, t.status, o.number, c.name, t.created_at, m.body
        FROM tickets t JOIN orders o ON o.id = t.order_id
        JOIN customers c ON c.id = t.customer_id
        LEFT JOIN messages m ON m.id = :hit WHERE t.id = :ticket_id"""
)


@dataclass(frozen=True, slots=True)
class Hit:
    """A ticket that matches, and an excerpt of the latest message that matched."""

    ticket_id: int
    subject: str
    status: str
    order: str
    customer: str
    created_at: datetime
    excerpt: str


def words(query: str) -> list[str]:
    """The query's words (letters and digits), at most :data:`MAX_WORDS`."""
    return _WORD.findall(query.casefold())[:MAX_WORDS]


def _excerpt(body: str | None, found: list[str], width: int = 160) -> str:
    if not body:
        return ""
    folded = body.casefold()
    at = min((i for w in found if (i := folded.find(w)) >= 0), default=0)
    start = max(0, at - width // 3)
    cut = body[start : start + width].replace("\n", " ")
    return ("…" if start else "") + cut + ("…" if start + width < len(body) else "")


def search(db: Database, query: str, limit: int = MAX_HITS) -> list[Hit]:
    """Tickets whose subject or a message holds every word of ``query`` (as a prefix),
    newest first, at most ``limit``."""
    found = words(query)
    if not found:
        return []
    with db.read_connection() as c:
        return _search(c, found, min(limit, MAX_HITS))


def _search(c: Connection, found: list[str], limit: int) -> list[Hit]:
    if c.dialect.name == "postgresql":
        statement, q = _POSTGRESQL, " & ".join(f"{w}:*" for w in found)
    else:
        statement, q = _SQLITE, " ".join(f'"{w}"*' for w in found)
    ids = c.execute(statement, {"q": q, "n": limit}).all()
    hits = []
    for ticket_id, hit in ids:
        row = c.execute(_ROWS, {"ticket_id": ticket_id, "hit": hit}).one()
        tid, subject, status, order, customer, created_at, body = row
        excerpt = _excerpt(body, found)
        hits.append(Hit(tid, subject, status, order, customer, created_at, excerpt))
    return hits
