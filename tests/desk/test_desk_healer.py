"""The healer resumes a run left pending with no execution, and only such a run: one the
queue handed out again between two looks (its row moved) or one executing here is left
alone, so a run is never executed twice beside itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tether_desk.operations import healing
from tether_desk.operations.healing import Healer


@dataclass
class Row:
    workflow_id: str
    updated_at: int
    queue_name: str = "tether_desk.tickets"


class FakeClient:
    """The two reads and the one write of the durable log that the healer makes."""

    def __init__(self) -> None:
        self.pending: list[Row] = []
        self.resumed: list[str] = []

    def list_workflows(self, *, status: str, **_: Any) -> list[Row]:
        return list(self.pending) if status == "PENDING" else []

    def resume_workflow(self, workflow_id: str, *, queue_name: str | None = None) -> None:
        self.resumed.append(workflow_id)


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    running: set[str] = {"desk-ticket-9"}  # executing in this process
    monkeypatch.setattr(healing, "running_workflow_ids", lambda: running)
    return FakeClient()


def test_a_run_left_behind_is_resumed_once_after_two_looks(client: FakeClient) -> None:
    healer = Healer(client, None, "local", "1")
    client.pending = [Row("desk-ticket-1", 100)]
    assert healer.heal() == []  # first look: only a suspect
    assert healer.heal() == ["desk-ticket-1"]
    assert client.resumed == ["desk-ticket-1"]
    assert healer.heal() == []  # a new suspect again, not resumed twice in a row


def test_a_run_handed_out_again_between_two_looks_is_not_resumed(client: FakeClient) -> None:
    healer = Healer(client, None, "local", "1")
    client.pending = [Row("desk-ticket-2", 100)]
    healer.heal()
    client.pending = [Row("desk-ticket-2", 170)]  # recovered and dispatched since
    assert healer.heal() == []
    assert client.resumed == []
    assert healer.heal() == ["desk-ticket-2"]  # unchanged since: left behind after all


def test_a_run_executing_here_is_never_resumed(client: FakeClient) -> None:
    healer = Healer(client, None, "local", "1")
    client.pending = [Row("desk-ticket-9", 100)]
    for _ in range(3):
        assert healer.heal() == []
    assert client.resumed == []
