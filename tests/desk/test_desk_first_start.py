"""A desk's first start on a new log: its queue is in the log before DBOS launches.

DBOS's queue manager starts a queue's thread when it finds the queue's row, and looks for
rows at launch, then once a second. A queue registered only after launch (as the desk did)
left the tickets and decisions of a first start's first second waiting for that look; a
log that has the row already (every later start) keeps it as it is."""

from __future__ import annotations

import sqlite3

import pytest
from durable_ops import durable, log_path

from tether.durable import DurableConfig
from tether_desk.durable import runner
from tether_desk.pipeline import Desk


def queues(desk: Desk) -> dict[str, float]:
    with sqlite3.connect(log_path(desk)) as c:
        return dict(c.execute("SELECT name, polling_interval_sec FROM queues"))


@pytest.fixture
def at_launch(desk: Desk, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, float]]:
    """The log's queues each time the desk launches DBOS (what DBOS's queue manager finds
    at its first look)."""
    seen: list[dict[str, float]] = []
    real = runner.launch

    def launch(config: DurableConfig | None = None) -> None:
        seen.append(queues(desk))
        real(config)

    monkeypatch.setattr(runner, "launch", launch)
    return seen


async def test_a_new_logs_queue_is_there_when_dbos_launches(
    desk: Desk, at_launch: list[dict[str, float]]
) -> None:
    assert not log_path(desk).exists()
    runs = durable(desk)
    await runs.start()
    await runs.stop()
    assert at_launch == [{runner.QUEUE: runs.settings.poll_seconds}]


async def test_a_queue_already_in_the_log_is_left_until_dbos_registers_it(
    desk: Desk, at_launch: list[dict[str, float]]
) -> None:
    runs = durable(desk)
    await runs.start()
    await runs.stop()
    with sqlite3.connect(log_path(desk)) as c:  # changed in the log since
        c.execute("UPDATE queues SET polling_interval_sec = 7 WHERE name = ?", (runner.QUEUE,))
    again = durable(desk)
    await again.start()
    await again.stop()
    assert at_launch[1] == {runner.QUEUE: 7}  # as it was, until DBOS runs
    assert queues(desk) == {runner.QUEUE: again.settings.poll_seconds}  # then registered
