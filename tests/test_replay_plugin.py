"""The pytest plugin: record with --record and the key set, replay otherwise, fail on a
divergence or a missing cassette. Each case runs a separate pytest session (pytester)."""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

INNER_TEST = '''
import os
import pytest
from tether.loop import Agent
from tether.providers.scripted import ScriptedClient, call_reply, text_reply
from tether.tools import tool


@tool(name="lire_commande", thread=False)
def read_order(numero: str) -> str:
    """Read an order's status. Use it for order questions. It changes nothing."""
    return f"{numero}: " + os.environ.get("ORDER_STATUS", "expediee")


def real_client():
    assert os.environ.get("TETHER_TEST_KEY"), "the real client needs its key"
    return ScriptedClient([
        call_reply(("lire_commande", {"numero": "C-1042"})),
        text_reply("Expediee."),
    ])


@pytest.mark.tether_cassette(key="TETHER_TEST_KEY")
async def test_order(tether_cassette):
    assert tether_cassette.recording == (os.environ.get("EXPECT") == "record")
    client = tether_cassette.client(real_client)
    agent = Agent(client, tether_cassette.tools([read_order]), instructions="Be brief.")
    result = await agent.run("Ou en est C-1042 ?")
    tether_cassette.finish(result)
    assert result.output == "Expediee."
'''
CASSETTE = "cassettes/test_inner/test_order.json"


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_inner=INNER_TEST)
    pytester.makeini(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
    )
    return pytester


def test_records_with_the_key_then_replays_without_it(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_TEST_KEY", "sk-test-PLUGINKEY-0123456789")
    monkeypatch.setenv("EXPECT", "record")
    inner.runpytest_subprocess("--record").assert_outcomes(passed=1)
    cassette = inner.path / CASSETTE
    document = json.loads(cassette.read_text())
    assert [i["type"] for i in document["interactions"]] == [
        "request",
        "response",
        "tool",
        "request",
        "response",
    ]
    assert "PLUGINKEY" not in cassette.read_text()

    monkeypatch.delenv("TETHER_TEST_KEY")
    monkeypatch.setenv("EXPECT", "replay")
    inner.runpytest_subprocess().assert_outcomes(passed=1)  # no key: the cassette answers
    inner.runpytest_subprocess("--record").assert_outcomes(passed=1)  # --record needs the key

    monkeypatch.setenv("ORDER_STATUS", "perdue")
    result = inner.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*the replay diverged from the cassette at turn 1, call call_1 (lire_commande): "
            "the result*",
            '*-  "result": "C-1042: expediee"*',
            '*+  "result": "C-1042: perdue"*',
        ]
    )


def test_a_missing_cassette_fails_with_the_command_to_record_it(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EXPECT", "replay")
    result = inner.runpytest_subprocess()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*no cassette at *test_order.json: run pytest --record with TETHER_TEST_KEY set*"]
    )


def test_an_async_cassette_test_runs_without_an_async_plugin(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_inner=INNER_TEST)
    monkeypatch.setenv("TETHER_TEST_KEY", "sk-test-PLUGINKEY-0123456789")
    monkeypatch.setenv("EXPECT", "record")
    pytester.runpytest_subprocess("-p", "no:asyncio", "--record").assert_outcomes(passed=1)
    monkeypatch.delenv("TETHER_TEST_KEY")
    monkeypatch.setenv("EXPECT", "replay")
    pytester.runpytest_subprocess("-p", "no:asyncio").assert_outcomes(passed=1)
