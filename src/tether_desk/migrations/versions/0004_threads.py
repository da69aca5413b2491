"""Threads, assignment, saved replies, full-text search and the e-mail outbox.

A ticket becomes a thread: ``messages`` holds every message in order (the customer's,
staff replies, agent drafts, internal notes, events). A trigger on ``tickets`` writes a new
ticket's text as its first message, whatever code or process inserts it; existing tickets
become one-message threads (two when a reply was sent). ``tickets.assignee_id`` assigns a
ticket to a staff member; ``tickets.round`` counts the times a customer's reply sent it
through the pipeline again (a durable run per round). Search: SQLite keeps FTS5 tables
(``messages_fts``, ``tickets_fts``, external content, filled by triggers); PostgreSQL uses
GIN indexes on ``to_tsvector('simple', ...)``.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_FIRST_MESSAGE = (
    "INSERT INTO messages (ticket_id, kind, author_id, body, public, created_at) "
    "VALUES (NEW.id, 'customer', NEW.customer_id, NEW.body, {true}, NEW.created_at)"
)
_SQLITE = (
    """CREATE VIRTUAL TABLE messages_fts USING fts5(body, content='messages',
        content_rowid='id', tokenize='unicode61 remove_diacritics 2')""",
    """CREATE VIRTUAL TABLE tickets_fts USING fts5(subject, content='tickets',
        content_rowid='id', tokenize='unicode61 remove_diacritics 2')""",
    """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts (rowid, body) VALUES (NEW.id, NEW.body);
    END""",
    """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, body) VALUES ('delete', OLD.id, OLD.body);
    END""",
    """CREATE TRIGGER tickets_fts_delete AFTER DELETE ON tickets BEGIN
        INSERT INTO tickets_fts (tickets_fts, rowid, subject)
            VALUES ('delete', OLD.id, OLD.subject);
    END""",
)
_SQLITE_AFTER = (
    f"""CREATE TRIGGER tickets_first_message AFTER INSERT ON tickets BEGIN
        {_FIRST_MESSAGE.format(true=1)};
        INSERT INTO tickets_fts (rowid, subject) VALUES (NEW.id, NEW.subject);
    END""",
    "INSERT INTO tickets_fts (tickets_fts) VALUES ('rebuild')",
)
_POSTGRESQL = (
    "CREATE INDEX ix_messages_fts ON messages USING gin (to_tsvector('simple', body))",
    "CREATE INDEX ix_tickets_fts ON tickets USING gin (to_tsvector('simple', subject))",
)
_POSTGRESQL_AFTER = (
    f"""CREATE FUNCTION tickets_first_message() RETURNS trigger AS $$
    BEGIN
        {_FIRST_MESSAGE.format(true="true")};
        RETURN NULL;
    END
    $$ LANGUAGE plpgsql""",
    """CREATE TRIGGER tickets_first_message AFTER INSERT ON tickets
        FOR EACH ROW EXECUTE FUNCTION tickets_first_message()""",
)
_BACKFILL = (
    """INSERT INTO messages (ticket_id, kind, author_id, body, public, created_at)
        SELECT id, 'customer', customer_id, body, {true}, created_at FROM tickets
        ORDER BY id""",
    """INSERT INTO messages (ticket_id, kind, author_id, body, public, created_at)
        SELECT t.id, 'staff', d.sent_by, t.reply, {true}, t.replied_at FROM tickets t
        LEFT JOIN drafts d ON d.ticket_id = t.id
        WHERE t.reply IS NOT NULL AND t.replied_at IS NOT NULL ORDER BY t.id""",
)


def upgrade() -> None:
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("ticket_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("author_id", sa.Integer(), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("public", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["ticket_id"], ["tickets.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_messages_ticket_id_id", "messages", ["ticket_id", "id"])
    op.create_table(
        "saved_replies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(length=100), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("title"),
    )
    op.create_table(
        "notifications",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("to_addr", sa.String(length=254), nullable=False),
        sa.Column("subject", sa.String(length=200), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("claimed_at", sa.DateTime(), nullable=True),
        sa.Column("sent_at", sa.DateTime(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key"),
    )
    op.create_index("ix_notifications_sent_at", "notifications", ["sent_at"])
    op.add_column("tickets", sa.Column("assignee_id", sa.Integer(), nullable=True))
    op.add_column("tickets", sa.Column("round", sa.Integer(), nullable=False, server_default="0"))
    op.create_index("ix_tickets_assignee_id", "tickets", ["assignee_id"])
    postgresql = op.get_bind().dialect.name == "postgresql"
    if postgresql:  # SQLite cannot add a constraint to a table (the code checks the id)
        op.create_foreign_key("fk_tickets_assignee", "tickets", "staff", ["assignee_id"], ["id"])
    for statement in _POSTGRESQL if postgresql else _SQLITE:
        op.execute(statement)
    for statement in _BACKFILL:
        op.execute(statement.format(true="true" if postgresql else "1"))
    for statement in _POSTGRESQL_AFTER if postgresql else _SQLITE_AFTER:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER tickets_first_message ON tickets")
        op.execute("DROP FUNCTION tickets_first_message()")
        op.execute("DROP INDEX ix_tickets_fts")
    else:
        for name in (
            "tickets_first_message",
            "tickets_fts_delete",
            "messages_fts_delete",
            "messages_fts_insert",
        ):
            op.execute(f"DROP TRIGGER {name}")
        op.execute("DROP TABLE tickets_fts")
        op.execute("DROP TABLE messages_fts")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("fk_tickets_assignee", "tickets", type_="foreignkey")
    op.drop_index("ix_tickets_assignee_id", table_name="tickets")
    op.drop_column("tickets", "assignee_id")
    op.drop_column("tickets", "round")
    op.drop_table("saved_replies")
    op.drop_index("ix_notifications_sent_at", table_name="notifications")
    op.drop_table("notifications")
    op.drop_index("ix_messages_ticket_id_id", table_name="messages")
    op.drop_table("messages")
