"""Alembic environment: migrations run on the connection the desk hands over."""

from __future__ import annotations

from alembic import context

from tether_desk.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run the desk's migrations through Database.migrate()")
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
