"""Server-side sessions, login throttling, and versions for optimistic concurrency.

``web_sessions`` holds one row per logged-in browser (the cookie carries a random token;
the row is keyed by its SHA-256, so a stolen database does not give live cookies).
``login_throttle`` counts failed logins per account and per client address.
``tickets.version`` and ``drafts.version`` grow on every change: a transition states the
version it expects. ``drafts.agent_body`` keeps the agent's latest text beside a draft
staff wrote (never over it). ``approvals.approved_cents`` is the amount staff approved
when lower than the one proposed.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("account_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_web_sessions_account", "web_sessions", ["role", "account_id"])
    op.create_table(
        "login_throttle",
        sa.Column("key", sa.String(length=300), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("last_failure", sa.DateTime(), nullable=False),
        sa.Column("locked_until", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("key"),
    )
    op.add_column("tickets", sa.Column("version", sa.Integer(), nullable=False, server_default="1"))
    op.add_column("drafts", sa.Column("version", sa.Integer(), nullable=False, server_default="1"))
    op.add_column("drafts", sa.Column("agent_body", sa.Text(), nullable=True))
    op.add_column("approvals", sa.Column("approved_cents", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("approved_cents")
    with op.batch_alter_table("drafts") as batch:
        batch.drop_column("agent_body")
        batch.drop_column("version")
    with op.batch_alter_table("tickets") as batch:
        batch.drop_column("version")
    op.drop_table("login_throttle")
    op.drop_index("ix_web_sessions_account", table_name="web_sessions")
    op.drop_table("web_sessions")
