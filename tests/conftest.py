"""Shared fixtures: small tools used across the loop tests; one PostgreSQL server for the
whole session (the desk's and the durable mode's tests), a fresh database per test."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from typing import Annotated

import pytest
from pydantic import Field

from postgres_server import PostgresServer, pg_bin, postgres_server
from tether.errors import ToolFailure
from tether.state_seal import KEYS_ENV, StateKeys
from tether.tools import FunctionTool, tool

# Run states are sealed: every test (and every process a test starts) shares one fresh key.
os.environ[KEYS_ENV] = StateKeys.generate("tests").dumps()

ORDERS = {"C-1042": ("expediee", 89.90), "C-2210": ("livree", 35.0)}


@tool(name="lire_commande", thread=False)
def read_order(
    numero: Annotated[str, Field(pattern=r"^C-\d{4}$", description="Order number, like C-1234.")],
) -> dict[str, object]:
    """Read an order's shipping status and amount paid. Use it when the customer asks
    about an order. It changes nothing."""
    if numero not in ORDERS:
        raise ToolFailure(f"No order {numero}.")
    status, amount = ORDERS[numero]
    return {"numero": numero, "statut": status, "montant": amount}


@tool(thread=False)
def explode(reason: Annotated[str, "Why it should fail."]) -> str:
    """Always fails with an exception whose text is secret. Used to test error results.
    Never succeeds."""
    raise RuntimeError(f"secret path /srv/db.sqlite: {reason}")


@tool
async def slow(seconds: Annotated[float, "How long to sleep."]) -> str:
    """Sleeps, then answers. Used to test timeouts and cancellation. Does nothing else."""
    await asyncio.sleep(seconds)
    return "woke up"


@pytest.fixture
def tools() -> list[FunctionTool]:
    return [read_order, explode, slow]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    """Debian's PostgreSQL on 127.0.0.1, started at first use, stopped at the session's end."""
    if pg_bin() is None:
        pytest.fail("PostgreSQL is not installed: run `apt-get install postgresql` (.ci/run does)")
    with postgres_server() as server:
        yield server
        if not server.alive():
            pytest.fail(server.failure("the test PostgreSQL server stopped during the session"))


@pytest.fixture
def pg_url(pg_server: PostgresServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of a new empty database on the session's server, dropped after the test."""
    url = pg_server.create_database(request.node.name)
    yield url
    pg_server.drop_database(url)


def _dbos_launched() -> bool:
    """Whether DBOS runs in this process (without importing it where no test did)."""
    if "dbos" not in sys.modules:
        return False
    from tether.durable.runtime import is_launched

    return is_launched()


def _stop_dbos_left_running(by: str) -> None:
    """Stop DBOS if it still runs, and fail naming ``by``, which left it running."""
    if _dbos_launched():
        from tether.durable.runtime import shutdown

        shutdown()
        pytest.fail(f"{by} left DBOS running (stop it in a finally or a fixture)")


@pytest.fixture(autouse=True)
def dbos_left_running() -> Iterator[None]:
    """A test that launches DBOS must stop it: one left running fails here, named, and is
    stopped, instead of failing every later test with "DBOS is already running" (and
    keeping its threads alive at the interpreter's exit). DBOS launched by a module's
    fixture, set up before this one, is that fixture's to stop."""
    before = _dbos_launched()
    yield
    if not before:
        _stop_dbos_left_running("this test")


@pytest.fixture(scope="module", autouse=True)
def dbos_left_running_by_the_module() -> Iterator[None]:
    """The same check for a module's fixtures: DBOS stopped when the module ends."""
    yield
    _stop_dbos_left_running("this module's fixtures")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Forked children a test left running are killed and named: the interpreter would wait
    for them at its exit, past the end of the run (see ``forked.run_forked``)."""
    import multiprocessing

    for child in multiprocessing.active_children():
        print(f"\nkilled {child.name} (pid {child.pid}), left running by a test", file=sys.stderr)
        child.kill()
        child.join(5)
