"""The numbers an operator watches, for Prometheus (``prometheus-client``), read from the
databases at each scrape by a custom collector (no process holds them in memory, so
every console process of a desk exports the same values):

* ``desk_tickets{status}``: tickets by status;
* ``desk_runs{state}``: durable runs not yet done, by state (see
  :mod:`tether_desk.operations.runs`), and ``desk_runs_needing_attention``;
* ``desk_approvals_waiting`` and ``desk_approval_oldest_wait_seconds``;
* ``desk_step_seconds{step}``: a histogram of durable steps' latency (from the durable
  log's step timings);
* ``desk_model_tokens_total{direction}``, ``desk_model_requests_total`` and
  ``desk_model_errors_total{outcome}`` (runs that ended on a failure outcome);
* ``desk_ledger_refusals_total``: refunds the ledger or the desk's screening refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import Engine, String, case, cast, create_engine, func, select, text
from sqlalchemy.engine import make_url

from tether_desk.clock import utcnow
from tether_desk.models import Approval, Notification, Run, RunEvent, Ticket
from tether_desk.operations.attention import desk_runs, durable_client
from tether_desk.operations.runs import STATE_WORDS
from tether_desk.pipeline import Desk

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
OK_OUTCOMES = ("running", "completed", "awaiting_approval", "answered", "draft_ready")


class DeskCollector(Collector):
    """Collects the desk's metrics from its databases at each scrape."""

    def __init__(self, desk: Desk) -> None:
        self.desk = desk
        self._log: Engine | None = None

    def collect(self) -> Iterator[Any]:
        yield from self._tickets_and_approvals()
        yield from self._notifications()
        yield from self._model()
        yield from self._runs()
        yield from self._steps()

    def _tickets_and_approvals(self) -> Iterator[Any]:
        tickets = GaugeMetricFamily("desk_tickets", "Tickets by status.", labels=["status"])
        with self.desk.db.read() as s:
            for status, n in s.execute(select(Ticket.status, func.count()).group_by(Ticket.status)):
                tickets.add_metric([status], n)
            waiting, oldest = s.execute(
                select(func.count(), func.min(Approval.created_at)).where(
                    Approval.status == "pending"
                )
            ).one()
        yield tickets
        yield GaugeMetricFamily(
            "desk_approvals_waiting", "Refund approvals waiting for staff.", value=waiting
        )
        age = (utcnow() - oldest).total_seconds() if oldest is not None else 0.0
        yield GaugeMetricFamily(
            "desk_approval_oldest_wait_seconds",
            "How long the oldest waiting approval has waited.",
            value=max(age, 0.0),
        )

    def _notifications(self) -> Iterator[Any]:
        from tether_desk.notify import MAX_ATTEMPTS

        state = case((Notification.attempts >= MAX_ATTEMPTS, "given_up"), else_="queued")
        family = GaugeMetricFamily(
            "desk_notifications",
            "E-mails not sent: queued (to be sent or retried) or given up after every attempt.",
            labels=["state"],
        )
        counts = {"queued": 0, "given_up": 0}
        with self.desk.db.read() as s:
            rows = s.execute(
                select(state, func.count()).where(Notification.sent_at.is_(None)).group_by(state)
            )
            counts.update({str(k): int(n) for k, n in rows})
        for k, n in counts.items():
            family.add_metric([k], n)
        yield family

    def _model(self) -> Iterator[Any]:
        with self.desk.db.read() as s:
            tokens_in, tokens_out, requests = s.execute(
                select(
                    func.coalesce(func.sum(Run.input_tokens), 0),
                    func.coalesce(func.sum(Run.output_tokens), 0),
                    func.coalesce(func.sum(Run.requests), 0),
                )
            ).one()
            bad = s.execute(
                select(Run.status, func.count())
                .where(Run.status.not_in(OK_OUTCOMES))
                .group_by(Run.status)
            ).all()
            refusals = s.scalar(
                select(func.count()).where(
                    (RunEvent.kind == "refused_by_desk")
                    | (
                        (RunEvent.kind == "tool_finished")
                        & cast(RunEvent.data, String).like("%Refund refused%")
                    )
                )
            )
        tokens = CounterMetricFamily(
            "desk_model_tokens", "Model tokens used by the desk's runs.", labels=["direction"]
        )
        tokens.add_metric(["input"], tokens_in)
        tokens.add_metric(["output"], tokens_out)
        yield tokens
        yield CounterMetricFamily("desk_model_requests", "Model requests.", value=requests)
        errors = CounterMetricFamily(
            "desk_model_errors", "Runs that ended on a failure outcome.", labels=["outcome"]
        )
        for outcome, n in bad:
            errors.add_metric([outcome], n)
        yield errors
        yield CounterMetricFamily(
            "desk_ledger_refusals", "Refunds refused by the ledger or the desk.", value=refusals
        )

    def _runs(self) -> Iterator[Any]:
        if durable_client(self.desk) is None:
            return
        rows = desk_runs(self.desk)
        runs = GaugeMetricFamily("desk_runs", "Durable runs not yet done.", labels=["state"])
        for state in STATE_WORDS:
            if state != "done":
                runs.add_metric([state], sum(r.state == state for r in rows))
        yield runs
        yield GaugeMetricFamily(
            "desk_runs_needing_attention",
            "Runs that cannot go on by themselves.",
            value=sum(r.needs_attention for r in rows),
        )

    def _steps(self) -> Iterator[Any]:
        runs = self.desk.runs
        url = getattr(runs, "url", None)
        if url is None:
            return
        if self._log is None:
            self._log = create_engine(url, pool_size=1, max_overflow=0)
        table = "operation_outputs"
        if make_url(url).get_backend_name() == "postgresql":
            table = "dbos.operation_outputs"
        took = "(completed_at_epoch_ms - started_at_epoch_ms) / 1000.0"
        buckets = ", ".join(f"SUM(CASE WHEN {took} <= {b} THEN 1 ELSE 0 END)" for b in BUCKETS)
        query = text(
            f"SELECT function_name, COUNT(*), SUM({took}), {buckets} FROM {table} "
            "WHERE completed_at_epoch_ms IS NOT NULL AND started_at_epoch_ms IS NOT NULL "
            "GROUP BY function_name"
        )
        family = HistogramMetricFamily(
            "desk_step_seconds", "Durable steps' latency.", labels=["step"]
        )
        try:
            with self._log.connect() as c:
                rows = c.execute(query).all()
        except Exception:  # the log not created yet
            rows = []
        for name, count, total, *cumulative in rows:
            points = [(str(b), int(n or 0)) for b, n in zip(BUCKETS, cumulative, strict=True)]
            family.add_metric([name], [*points, ("+Inf", int(count))], float(total or 0.0))
        yield family


def desk_registry(desk: Desk) -> CollectorRegistry:
    """A registry holding the desk's collector (one per app)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DeskCollector(desk))
    return registry
