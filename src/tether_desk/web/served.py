"""``tether serve --workers N``: N uvicorn worker processes serve the console.

The serve command calls :func:`serve_workers`: it makes the database's secrets, puts what
the workers need in their environment (the database, already created, migrated and
seeded; the model spec; the kind of runs), and each worker builds its console here
(:func:`app_from_environment`). Each worker sends the notifications through the mailer
the serve command was given (``--smtp``, ``--print-mail``).

* Plain (``--plain``): each worker processes new tickets too (a claim keeps each ticket to
  one) and loads the model; decided runs that never continued are resumed once, by the
  serve command, before the workers start.
* Durable (the default): the workers are consoles only. They hand new tickets to the
  durable queue and send decisions to the runs that wait for them, and load no model. The
  tickets run in exactly one process, the serve command's own: its durable executor
  (``--id``) runs on a thread of its own beside uvicorn's supervisor, and resends the
  decisions that never reached their run, once, before the workers start. With
  ``--no-process`` no process of the serve command runs tickets: ``tether worker``
  processes on the same database do.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from fastapi import FastAPI

from tether.clients import BaseChatClient, ChatOptions, ChatResponse
from tether.errors import ConfigError
from tether.messages import Message
from tether.tools import ToolSpec
from tether_desk.pipeline import Desk

DB_ENV = "TETHER_DESK_SERVE_DB"
"""The database URL a worker opens (set by ``tether serve``)."""
MODEL_ENV = "TETHER_DESK_SERVE_MODEL"
"""The model spec a worker uses (set by ``tether serve``)."""
RUNS_ENV = "TETHER_DESK_SERVE_RUNS"
"""``durable`` (workers are consoles of the durable queue) or ``plain`` (set by ``tether
serve``; absent: plain)."""
MAIL_ENV = "TETHER_DESK_SERVE_MAIL"
"""Where each worker's outbox sends notifications (:func:`tether_desk.notify.mailer_spec`:
``print``, ``smtp:HOST:PORT``; empty: they stay queued). Every worker runs an outbox; its
claims keep each e-mail to one of them."""


class NoModel(BaseChatClient):
    """The model of a durable console process: it runs no ticket, so any request is a
    mistake said plainly (and the embedded model is not loaded N times for nothing)."""

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSpec], options: ChatOptions
    ) -> ChatResponse:
        raise ConfigError("this console process runs no model; tickets run on durable workers")


def app_from_environment() -> FastAPI:
    """One worker's console (uvicorn's app factory)."""
    from tether_desk.db import Database
    from tether_desk.web.app import create_app

    db = Database(os.environ[DB_ENV])
    if os.environ.get(RUNS_ENV) == "durable":
        from tether_desk.durable import DurableDesk

        desk = Desk(db, NoModel())
        DurableDesk(desk, process=False)  # desk.runs: the queue, no executor here
    else:
        from tether_desk.models_cli import desk_client, desk_triage_client

        spec = os.environ[MODEL_ENV]
        desk = Desk(db, desk_client(spec, say=lambda _: None), desk_triage_client(spec))
    from tether_desk.notify import mailer_of
    from tether_desk.web.settings import WebSettings

    desk.mailer = mailer_of(os.environ.get(MAIL_ENV, ""))
    return create_app(desk, recover=False, settings=WebSettings.from_env(os.environ))


def serve_workers(desk: Desk, spec: str, host: str, port: int, workers: int) -> None:
    """Serve ``desk``'s console from ``workers`` uvicorn processes until Ctrl-C, the
    tickets running as the module doc says."""
    import uvicorn

    from tether_desk.web.app import stored_secret

    for key in ("csrf_secret",):
        stored_secret(desk.db, key)
    os.environ[DB_ENV] = desk.db.url
    os.environ[MODEL_ENV] = spec
    os.environ[RUNS_ENV] = "plain" if desk.runs is None else "durable"
    from tether_desk.notify import mailer_spec

    os.environ[MAIL_ENV] = mailer_spec(desk.mailer)
    with tickets_running(desk):
        uvicorn.run(
            "tether_desk.web.served:app_from_environment",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="warning",
            access_log=False,  # info lines, never shown at warning: not even formatted
            lifespan="on",
            proxy_headers=False,  # the app reads them from its trusted proxies only
        )


@contextmanager
def tickets_running(desk: Desk) -> Iterator[None]:
    """While the block runs, ``desk``'s tickets run here if this process runs them (a
    durable desk's executor, on a thread and an event loop of its own); decided runs
    that never continued are resumed (plain) or their decisions sent again (durable)
    first, once."""
    from tether_desk.decisions import recover_decided

    runs = desk.runs
    if runs is None:
        asyncio.run(recover_decided(desk))
        yield
        return
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop = asyncio.Event()

    async def execute() -> None:
        await runs.start()
        try:
            await recover_decided(desk)
            ready.set()
            await stop.wait()
        finally:
            await runs.stop()

    thread = threading.Thread(target=loop.run_forever, name="desk-durable-executor")
    thread.start()
    done = asyncio.run_coroutine_threadsafe(execute(), loop)
    try:
        while not ready.wait(0.1):
            if done.done():
                done.result()  # the executor did not start: say why
        yield
    finally:
        loop.call_soon_threadsafe(stop.set)
        try:
            done.result(timeout=60)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()
