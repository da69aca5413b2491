"""Ticket counts kept by the database, and the inbox's index.

The inbox shows how many tickets there are (all, or of one status) on every page. Counting
them scans the table; ``ticket_counts`` holds one row per status, kept exact by triggers on
``tickets`` (insert, delete, and an update that changes the status), in the transaction
that changes the ticket, whatever code or process writes it. ``ix_tickets_status_id``
(status, id) serves the inbox filtered by status newest first, and the worker's oldest-new
first, from the index alone; ``ix_tickets_customer_id_id`` (customer_id, id) does the same for
a customer's own list. They replace the indexes on status and on customer_id alone.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_SQLITE_TRIGGERS = (
    """CREATE TRIGGER ticket_counts_insert AFTER INSERT ON tickets BEGIN
        INSERT INTO ticket_counts (status, n) VALUES (NEW.status, 1)
            ON CONFLICT (status) DO UPDATE SET n = n + 1;
    END""",
    """CREATE TRIGGER ticket_counts_delete AFTER DELETE ON tickets BEGIN
        UPDATE ticket_counts SET n = n - 1 WHERE status = OLD.status;
    END""",
    """CREATE TRIGGER ticket_counts_update AFTER UPDATE OF status ON tickets
        WHEN OLD.status IS NOT NEW.status BEGIN
        UPDATE ticket_counts SET n = n - 1 WHERE status = OLD.status;
        INSERT INTO ticket_counts (status, n) VALUES (NEW.status, 1)
            ON CONFLICT (status) DO UPDATE SET n = n + 1;
    END""",
)
_POSTGRESQL_TRIGGERS = (
    """CREATE FUNCTION ticket_counts_track() RETURNS trigger AS $$
    BEGIN
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            UPDATE ticket_counts SET n = n - 1 WHERE status = OLD.status;
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            INSERT INTO ticket_counts (status, n) VALUES (NEW.status, 1)
                ON CONFLICT (status) DO UPDATE SET n = ticket_counts.n + 1;
        END IF;
        RETURN NULL;
    END
    $$ LANGUAGE plpgsql""",
    """CREATE TRIGGER ticket_counts_insert_delete AFTER INSERT OR DELETE ON tickets
        FOR EACH ROW EXECUTE FUNCTION ticket_counts_track()""",
    """CREATE TRIGGER ticket_counts_update AFTER UPDATE OF status ON tickets
        FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
        EXECUTE FUNCTION ticket_counts_track()""",
)


def upgrade() -> None:
    op.create_table(
        "ticket_counts",
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("status"),
    )
    op.create_index("ix_tickets_status_id", "tickets", ["status", "id"])
    op.drop_index("ix_tickets_status", table_name="tickets")
    op.create_index("ix_tickets_customer_id_id", "tickets", ["customer_id", "id"])
    op.drop_index("ix_tickets_customer_id", table_name="tickets")
    op.execute(
        "INSERT INTO ticket_counts (status, n) SELECT status, count(*) FROM tickets GROUP BY status"
    )
    postgresql = op.get_bind().dialect.name == "postgresql"
    for statement in _POSTGRESQL_TRIGGERS if postgresql else _SQLITE_TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    op.create_index("ix_tickets_customer_id", "tickets", ["customer_id"])
    op.drop_index("ix_tickets_customer_id_id", table_name="tickets")
    op.create_index("ix_tickets_status", "tickets", ["status"])
    op.drop_index("ix_tickets_status_id", table_name="tickets")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER ticket_counts_update ON tickets")
        op.execute("DROP TRIGGER ticket_counts_insert_delete ON tickets")
        op.execute("DROP FUNCTION ticket_counts_track()")
    else:
        for name in ("ticket_counts_update", "ticket_counts_delete", "ticket_counts_insert"):
            op.execute(f"DROP TRIGGER {name}")
    op.drop_table("ticket_counts")
