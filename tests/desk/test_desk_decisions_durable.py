"""A staff decision on a durable SQLite desk (``tether serve``'s default), as the console
takes it: an approval stored by this layout's step is claimed without a look at the
durable log (its run has no wait of the previous layout to find), and delivered in the
console's own thread (one short write to the log, no thread hop); the run still goes on
to its draft, once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from helpers import add_ticket, pending_approval, refunds_by_order, staff_id, until_status

from tether.durable.status import WorkflowLog
from tether_desk.decisions import claim_decision, resume
from tether_desk.durable import DurableDesk, finish_id
from tether_desk.durable.flow import TRACE_SEQ
from tether_desk.pipeline import Desk

TEXT = "Le colis est arrive abime, merci de me rembourser 12 EUR."


def _on_this_thread(calls: list[str]) -> Callable[..., Any]:
    """A wrapper that notes the calls made from the test's thread (DBOS's own thread runs
    the workflows meanwhile)."""
    here = threading.get_ident()

    def note(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def noted(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == here:
                calls.append(name)
            return fn(*args, **kwargs)

        return noted

    return note


async def test_a_decision_on_this_layouts_run_reads_no_log_and_hops_to_no_thread(
    durable: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = durable.runs
    assert isinstance(runs, DurableDesk)
    tid = add_ticket(durable.db, TEXT, number="C-7001")
    await runs.submit_new()
    assert await until_status(durable.db, tid, "awaiting_approval") == "awaiting_approval"
    approval = pending_approval(durable.db, tid)
    assert approval is not None and TRACE_SEQ in approval.context  # this layout's step
    calls: list[str] = []
    note = _on_this_thread(calls)
    monkeypatch.setattr(WorkflowLog, "get", note("log.get", WorkflowLog.get))
    monkeypatch.setattr(asyncio, "to_thread", note("to_thread", asyncio.to_thread))

    claimed = claim_decision(durable, approval.id, staff_id(durable.db), approve=True)
    assert claimed.legacy_wait is False  # known from the approval: no wait to look for
    assert await resume(durable, claimed) == "awaiting_approval"  # as the claim read it
    assert calls == []  # neither the log read nor a thread hop, on the console's thread

    assert await until_status(durable.db, tid, "draft_ready") == "draft_ready"
    finish = runs.log.get(finish_id(approval.run_id, approval.call_id))
    assert finish is not None and finish.status == "SUCCESS"
    assert refunds_by_order(durable.db)["C-7001"] == 1200


async def test_a_second_decision_on_the_same_approval_is_refused_before_the_log(
    durable: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = durable.runs
    assert isinstance(runs, DurableDesk)
    tid = add_ticket(durable.db, TEXT, number="C-7002")
    await runs.submit_new()
    await until_status(durable.db, tid, "awaiting_approval")
    approval = pending_approval(durable.db, tid)
    assert approval is not None
    sid = staff_id(durable.db)
    claimed = claim_decision(durable, approval.id, sid, approve=False, reason="photo first")
    await resume(durable, claimed)
    calls: list[str] = []
    monkeypatch.setattr(WorkflowLog, "get", _on_this_thread(calls)("log.get", WorkflowLog.get))
    with pytest.raises(Exception, match="already denied"):
        claim_decision(durable, approval.id, sid, approve=True, typed_amount="12.00")
    assert calls == []
    assert await until_status(durable.db, tid, "draft_ready") == "draft_ready"
