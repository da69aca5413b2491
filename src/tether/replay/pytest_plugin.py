"""A pytest plugin: recorded runs as regression tests (the vcr pattern, at the model seam).

The ``tether_cassette`` fixture records when ``--record`` is passed and the key the test
names is set, and replays otherwise::

    @pytest.mark.tether_cassette(key="OPENAI_API_KEY")
    async def test_order_status(tether_cassette):
        client = tether_cassette.client(lambda: client_from_string("openai:gpt-5"))
        agent = Agent(client, tether_cassette.tools([read_order]), instructions=...)
        result = await agent.run("Ou en est ma commande C-1042 ?")
        tether_cassette.finish(result)        # replay: raises on the first divergence
        assert result.outcome.completed

The cassette lives in ``cassettes/<test module>/<test name>.json`` beside the test file
(``path=`` in the marker chooses another, relative to the test file). In replay mode the
factory is never called (no server, no key needed), tools run for real and are compared
with the recording (``stub_tools=True`` in the marker returns the recorded results), and a
missing cassette fails the test with the command that records it. ``secrets=`` in the
marker lists values to redact beyond the environment's keys.

A coroutine test that uses the fixture runs by itself: when no async plugin took it
(pytest-asyncio in auto mode, or its ``asyncio`` marker; anyio's ``anyio`` marker), the
plugin runs it with :func:`asyncio.run`.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.clients import ChatClient
from tether.replay.cassette import Cassette
from tether.replay.recorder import Recorder
from tether.replay.replayer import Replayer
from tether.tools import Tool

MARKER = "tether_cassette"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--record``: record cassettes (for tests whose key is set) instead of replaying."""
    parser.addoption(
        "--record",
        action="store_true",
        default=False,
        help="tether: record model cassettes against the real provider (needs its key)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Declare the marker."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(path=None, key=None, stub_tools=False, secrets=()): where the test's "
        "cassette lives, which environment variable must hold a key to record it, whether "
        "replayed tools are stubbed, and values to redact",
    )


class CassetteFixture:
    """Records or replays one test's model traffic; see the module docstring."""

    def __init__(
        self,
        path: Path,
        *,
        recording: bool,
        key: str | None,
        stub_tools: bool = False,
        secrets: Iterable[str] = (),
    ) -> None:
        self.path = path
        self.recording = recording
        """True when this run records (``--record`` and the key set)."""
        self.key = key
        self._secrets = list(secrets)
        self._stub_tools = stub_tools
        self.tape: Recorder | Replayer | None = None
        self._finished = False

    def _tape(self) -> Recorder | Replayer:
        if self.tape is None:
            if self.recording:
                self.tape = Recorder(secrets=self._secrets)
            else:
                if not self.path.is_file():
                    how = f" with {self.key} set" if self.key else ""
                    pytest.fail(
                        f"no cassette at {self.path}: run pytest --record{how} to record it",
                        pytrace=False,
                    )
                cassette = Cassette.load(self.path)
                self.tape = Replayer(cassette, stub_tools=self._stub_tools, secrets=self._secrets)
        return self.tape

    def client(self, factory: Callable[[], ChatClient]) -> ChatClient:
        """The client to use: ``factory()`` recorded, or the cassette's replay."""
        tape = self._tape()
        if isinstance(tape, Recorder):
            return tape.client(factory())
        return tape.client()

    def tools(self, tools: Iterable[Tool]) -> list[Tool]:
        """The tools, recorded or checked against the cassette."""
        return self._tape().tools(tools)

    def finish(self, result: Any = None) -> None:
        """End the run: save the cassette, or verify the replay (raises on a divergence)."""
        tape = self._tape()
        self._finished = True
        if isinstance(tape, Recorder):
            if result is not None:
                tape.finish(result)
            tape.save(self.path)
        else:
            tape.verify(result)

    def close(self) -> None:
        """Called after the test: finish if the test did not."""
        if self.tape is not None and not self._finished:
            self.finish()


def cassette_path(request: pytest.FixtureRequest, path: str | None) -> Path:
    """Where a test's cassette lives."""
    folder = Path(str(request.path)).parent
    if path:
        return folder / path
    name = _UNSAFE.sub("_", request.node.name).strip("_")
    return folder / "cassettes" / Path(str(request.path)).stem / f"{name}.json"


@pytest.fixture
def tether_cassette(request: pytest.FixtureRequest) -> Iterator[CassetteFixture]:
    """Record (``--record`` and the marker's key set) or replay this test's cassette."""
    marker = request.node.get_closest_marker(MARKER)
    options: dict[str, Any] = dict(marker.kwargs) if marker else {}
    key = options.get("key")
    wanted = bool(request.config.getoption("--record"))
    recording = wanted and (key is None or bool(os.environ.get(key, "").strip()))
    fixture = CassetteFixture(
        cassette_path(request, options.get("path")),
        recording=recording,
        key=key,
        stub_tools=bool(options.get("stub_tools", False)),
        secrets=options.get("secrets", ()),
    )
    yield fixture
    failed = getattr(request.node, "rep_call", None)
    if failed is None or not failed.failed:
        fixture.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the item, so the fixture knows whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a coroutine test that uses the cassette when no async plugin runs it."""
    func = pyfuncitem.obj
    uses_cassette = MARKER in pyfuncitem.fixturenames or pyfuncitem.get_closest_marker(MARKER)
    if not uses_cassette or not inspect.iscoroutinefunction(func):
        return None
    if any(pyfuncitem.get_closest_marker(name) for name in ("asyncio", "anyio")):
        return None  # that plugin runs it
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(func(**arguments))
    return True
