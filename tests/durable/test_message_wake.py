"""A message sent in this process (through DBOS or a client) wakes the run waiting for it
here at once, not at the log's next poll (a minute here); a DBOS whose message wait
changed is refused by name."""

from __future__ import annotations

import asyncio
import time

import pytest
from dbos import DBOS, DBOSClient, SetWorkflowID

from tether.durable import DurableConfig, launch, messages, shutdown_async, tune_client
from tether.errors import ConfigError

LONG_POLL = 60.0
"""The log's polling interval for waiting runs: longer than the test may take."""


@DBOS.workflow(name="messages.wait")
async def wait_for(topic: str) -> object:
    return await DBOS.recv_async(topic, timeout_seconds=LONG_POLL * 2)


async def test_a_message_sent_here_wakes_its_receiver_at_once(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/runs.sqlite"
    launch(DurableConfig(url, polling_interval_seconds=LONG_POLL))
    client = await asyncio.to_thread(DBOSClient, system_database_url=url)
    tune_client(client)
    try:
        with SetWorkflowID("messages-a"):
            by_dbos = await DBOS.start_workflow_async(wait_for, "decision")
        with SetWorkflowID("messages-b"):
            by_client = await DBOS.start_workflow_async(wait_for, "decision")
        await asyncio.sleep(0.3)  # both wait in recv by now
        started = time.monotonic()
        await DBOS.send_async("messages-a", "yes", "decision")
        assert await by_dbos.get_result() == "yes"
        await client.send_async("messages-b", "no", "decision")
        assert await by_client.get_result() == "no"
        assert time.monotonic() - started < LONG_POLL / 4  # no poll was waited for
    finally:
        await asyncio.to_thread(client.destroy)
        await shutdown_async()


def test_a_dbos_whose_message_wait_changed_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(messages, "_EXPECTED_DIGEST", "0" * 16)
    with pytest.raises(ConfigError, match="does not know this DBOS"):
        messages.install(object())
