"""PostgreSQL search reads stored text-search vectors.

``messages.search`` and ``tickets.search`` hold ``to_tsvector('simple', ...)`` of the body
and the subject (generated columns, kept by PostgreSQL itself), under GIN indexes that
replace the expression indexes of 0004. A search no longer parses a row's text again for
each row it looks at: a scan in id order (newest first, stopping at the page's hits)
checks a stored vector instead. SQLite is unchanged (its FTS5 tables stay).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_TABLES = (("messages", "body", "ix_messages_fts"), ("tickets", "subject", "ix_tickets_fts"))


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column, old in _TABLES:
        op.execute(
            f"ALTER TABLE {table} ADD COLUMN search tsvector "
            f"GENERATED ALWAYS AS (to_tsvector('simple', {column})) STORED"
        )
        op.execute(f"CREATE INDEX ix_{table}_search ON {table} USING gin (search)")
        op.execute(f"DROP INDEX {old}")
        op.execute(f"ANALYZE {table}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column, old in _TABLES:
        op.execute(f"CREATE INDEX {old} ON {table} USING gin (to_tsvector('simple', {column}))")
        op.execute(f"DROP INDEX ix_{table}_search")
        op.execute(f"ALTER TABLE {table} DROP COLUMN search")
