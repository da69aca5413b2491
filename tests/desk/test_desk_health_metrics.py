"""``/healthz``, ``/readyz`` and ``/metrics`` of a durable desk: metrics scraped over HTTP
and read by Prometheus's own text parser."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from durable_ops import status
from helpers import ticket_id_by_order
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.exc import OperationalError
from starlette.testclient import TestClient
from webclient import wait_for

from tether_desk.db import Database, sqlite_url
from tether_desk.durable import DurableDesk, DurableSettings
from tether_desk.pipeline import Desk
from tether_desk.scripted import DeskScriptedModel
from tether_desk.seed import seed
from tether_desk.web.app import create_app


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Desk, TestClient]]:
    db = Database(sqlite_url(tmp_path / "desk.db"))
    db.migrate()
    seed(db)
    desk = Desk(db, DeskScriptedModel())
    DurableDesk(desk, DurableSettings(poll_seconds=0.05))
    with TestClient(create_app(desk)) as client:
        yield desk, client
    db.dispose()


def samples(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_say_what_an_operator_watches(served: tuple[Desk, TestClient]) -> None:
    desk, client = served
    refund = ticket_id_by_order(desk.db, "C-2210")
    wait_for(lambda: status(desk.db, refund) == "awaiting_approval", 60)
    wait_for(lambda: "new" not in {status(desk.db, t) for t in range(1, 5)}, 60)
    m = samples(client)
    assert m[("desk_tickets", (("status", "awaiting_approval"),))] >= 1
    assert m[("desk_approvals_waiting", ())] >= 1
    assert m[("desk_approval_oldest_wait_seconds", ())] >= 0
    assert m[("desk_runs", (("state", "waiting"),))] == 0  # the approval holds no run
    assert m[("desk_runs", (("state", "error"),))] == 0
    assert m[("desk_runs_needing_attention", ())] == 0
    assert m[("desk_model_tokens_total", (("direction", "input"),))] > 0
    assert m[("desk_model_requests_total", ())] > 0
    assert ("desk_ledger_refusals_total", ()) in m
    triages = m[("desk_step_seconds_count", (("step", "desk.triage"),))]
    assert triages >= 4  # one triage step (claim, model call, record) per seeded ticket
    inf = m[("desk_step_seconds_bucket", (("le", "+Inf"), ("step", "desk.triage")))]
    assert inf == triages


def test_health_and_readiness(
    served: tuple[Desk, TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    desk, client = served
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"database": "ok", "durable_log": "ok"}

    @contextlib.contextmanager
    def down() -> Iterator[None]:
        raise OperationalError("SELECT 1", {}, Exception("disk I/O error"))
        yield

    monkeypatch.setattr(desk.db, "read_connection", down)
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["database"] == "unavailable: OperationalError"
    assert client.get("/healthz").status_code == 200  # alive, just not ready
