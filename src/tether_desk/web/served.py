"""The console of each worker process of ``tether serve --workers N``.

uvicorn starts the workers and each builds its app here (:func:`app_from_environment`),
from what the serve command put in their environment: the database (already created,
migrated and seeded, its secrets made) and the model spec. Each worker processes new
tickets too (a claim keeps each ticket to one); recovering decided runs is done once, by
the serve command, before the workers start.
"""

from __future__ import annotations

import os

from fastapi import FastAPI

DB_ENV = "TETHER_DESK_SERVE_DB"
"""The database URL a worker opens (set by ``tether serve``)."""
MODEL_ENV = "TETHER_DESK_SERVE_MODEL"
"""The model spec a worker uses (set by ``tether serve``)."""


def app_from_environment() -> FastAPI:
    """One worker's console (uvicorn's app factory)."""
    from tether_desk.db import Database
    from tether_desk.models_cli import desk_client, desk_triage_client
    from tether_desk.pipeline import Desk
    from tether_desk.web.app import create_app

    spec = os.environ[MODEL_ENV]
    desk = Desk(
        Database(os.environ[DB_ENV]),
        desk_client(spec, say=lambda _: None),
        desk_triage_client(spec),
    )
    return create_app(desk, recover=False)
