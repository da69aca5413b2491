"""The healer's pass runs in a daemon thread: a DBOS call retried without end while the
database is down never keeps a stopping process alive."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tether_desk.operations.upkeep import in_daemon_thread

STUCK = textwrap.dedent(
    """
    import asyncio, threading, time
    from tether_desk.operations.upkeep import in_daemon_thread

    async def main() -> None:
        try:
            await asyncio.wait_for(in_daemon_thread(lambda: time.sleep(3600)), 0.2)
        except TimeoutError:
            print("gave up", flush=True)

    asyncio.run(main())
    """
)


def test_a_pass_stuck_in_a_retry_does_not_hold_the_exit() -> None:
    done = subprocess.run([sys.executable, "-c", STUCK], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "gave up"


async def test_results_and_errors_come_back() -> None:
    assert await in_daemon_thread(lambda: 41 + 1) == 42

    def boom() -> None:
        raise ValueError("the database is down")

    with pytest.raises(ValueError, match="database is down"):
        await in_daemon_thread(boom)
