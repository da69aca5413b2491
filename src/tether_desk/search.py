"""Search across tickets and their messages, one interface on SQLite and PostgreSQL.

SQLite: the FTS5 tables ``messages_fts`` and ``tickets_fts`` (migration 0004, kept by
triggers). PostgreSQL: the stored ``search`` vectors (``to_tsvector('simple', ...)``,
migration 0005) under GIN indexes. Both match every
word of the query as a prefix ("rembours" finds "remboursement"; a one-letter word only
whole). The tickets of the :data:`SCAN` newest matching messages and of the newest
matching subjects, newest ticket first: a word in every ticket costs the same as a rare
one. A query is user input: only its words reach either query language, each quoted or
checked to be letters and digits, and at most :data:`MAX_WORDS` of them. Only staff
search: notes and drafts are found too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, DateTime, text

from tether_desk.db import Database

MAX_HITS = 25
MAX_WORDS = 8
MAX_QUERY = 1_000
"""Characters of a query read at most (a longer one is cut: its first words count)."""
_WORD = re.compile(r"[^\W_]+")
"""A word: letters and digits, as both full-text tokenizers split them (never an operator,
a quote or a column name of either query language)."""
SCAN = 200
"""Matching messages read at most (the newest), and subjects at most :data:`MAX_HITS`."""
_MATCHES = {
    "sqlite": (
        """SELECT m.ticket_id AS ticket_id, m.id AS hit FROM messages_fts
        JOIN messages m ON m.id = messages_fts.rowid
        WHERE messages_fts MATCH :q ORDER BY messages_fts.rowid DESC LIMIT :scan""",
        """SELECT rowid AS ticket_id, 0 AS hit FROM tickets_fts WHERE tickets_fts MATCH :q
        ORDER BY rowid DESC LIMIT :n""",
    ),
    "postgresql": (
        """SELECT ticket_id, id AS hit FROM messages WHERE search @@ to_tsquery('simple', :q)
        ORDER BY id DESC LIMIT :scan""",
        """SELECT id AS ticket_id, 0 AS hit FROM tickets
        WHERE search @@ to_tsquery('simple', :q) ORDER BY id DESC LIMIT :n""",
    ),
}
_SEARCH = {
    dialect: text(
        f"""WITH hits AS (
            SELECT ticket_id, max(hit) AS hit FROM (
                SELECT * FROM ({messages}) AS found_messages
                UNION ALL SELECT * FROM ({subjects}) AS found_subjects
            ) AS found GROUP BY ticket_id ORDER BY ticket_id DESC LIMIT :n
        )
        SELECT t.id, t.subject, t.status, o.number, c.name, t.created_at, m.body
        FROM hits JOIN tickets t ON t.id = hits.ticket_id
        JOIN orders o ON o.id = t.order_id JOIN customers c ON c.id = t.customer_id
        LEFT JOIN messages m ON m.id = hits.hit
        ORDER BY t.id DESC"""
    ).columns(created_at=DateTime)
    for dialect, (messages, subjects) in _MATCHES.items()
}
"""One statement: the tickets of the newest matching messages and subjects, newest ticket
first, with the latest matching message of each (its excerpt)."""


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
    """The query's words (letters and digits), at most :data:`MAX_WORDS`, from its first
    :data:`MAX_QUERY` characters."""
    return _WORD.findall(query[:MAX_QUERY].casefold())[:MAX_WORDS]


def _terms(found: list[str], postgresql: bool) -> str:
    """The match expression: every word, as a prefix from two letters on (a one-letter
    prefix would match nearly every token, at the cost of reading them all)."""
    if postgresql:
        return " & ".join(f"{w}:*" if len(w) > 1 else w for w in found)
    return " ".join(f'"{w}"*' if len(w) > 1 else f'"{w}"' for w in found)


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
    postgresql = c.dialect.name == "postgresql"
    statement = _SEARCH["postgresql" if postgresql else "sqlite"]
    params = {"q": _terms(found, postgresql), "n": limit, "scan": SCAN}
    rows = c.execute(statement, params).all()  # one fetch, not one per row
    return [Hit(int(r[0]), r[1], r[2], r[3], r[4], r[5], _excerpt(r[6], found)) for r in rows]
