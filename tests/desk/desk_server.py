"""``tether serve`` in a subprocess on 127.0.0.1, stopped with Ctrl-C (SIGINT)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    url: str
    process: subprocess.Popen[str]
    output: str = ""


@contextmanager
def serve(
    db: str,
    model: str = "scripted",
    port: int | None = None,
    env: dict[str, str] | None = None,
    args: tuple[str, ...] = (),
) -> Iterator[Served]:
    """Run ``tether serve`` until the block ends; then Ctrl-C it and check it stopped.
    ``env``: variables added to this process's environment (``PYTHONPATH`` for another
    revision in a benchmark); ``args``: more options (``--workers 2``)."""
    port = port or free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from tether.cli import main; main()",
            "serve",
            "--db",
            db,
            "--model",
            model,
            "--port",
            str(port),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
    )
    served = Served(f"http://127.0.0.1:{port}", process)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(
                f"tether serve exited: {process.stdout.read() if process.stdout else ''}"
            )
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.1)
    try:
        yield served
    finally:
        process.send_signal(signal.SIGINT)
        try:
            out, _ = process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            out, _ = process.communicate()
        served.output = out
