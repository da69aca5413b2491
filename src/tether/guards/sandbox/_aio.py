"""Descriptors and background work on the event loop: pipes that hold data, waiting for a
descriptor without a thread, writing all of a buffer, and removals left to run on their
own (awaited by :func:`settle`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Coroutine
from typing import Any

_BACKGROUND: set[asyncio.Task[None]] = set()


def background(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` without waiting for it (kept referenced until it is done)."""
    task = asyncio.ensure_future(work)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


async def settle() -> None:
    """Wait for the background removals started so far (cgroups of ended commands) on
    this event loop."""
    loop = asyncio.get_running_loop()
    if pending := {task for task in _BACKGROUND if task.get_loop() is loop}:
        await asyncio.wait(pending)


def data_fd(data: str | bytes) -> int:
    """A pipe's read end that holds ``data`` (at most a pipe buffer: 64 KiB)."""
    read, write = os.pipe()
    try:
        os.write(write, data.encode() if isinstance(data, str) else data)
    finally:
        os.close(write)
    return read


async def read_child_pid(fd: int) -> int:
    """The ``child-pid`` bwrap writes to its ``--info-fd`` once the sandbox exists."""
    buffer = b""
    while True:
        await wait_readable(fd, None)
        chunk = os.read(fd, 4096)
        if not chunk:
            raise ValueError("bwrap ended before it reported its sandbox")
        buffer += chunk
        with contextlib.suppress(ValueError):
            pid = json.loads(buffer)["child-pid"]
            if isinstance(pid, int) and pid > 1:
                return pid
            raise ValueError("bwrap reported no child pid")


async def wait_readable(fd: int, timeout: float | None) -> None:  # noqa: ASYNC109
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_reader(fd, _resolve, ready)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ready, timeout)
    finally:
        loop.remove_reader(fd)


async def write_all(fd: int, data: bytes) -> None:
    os.set_blocking(fd, False)
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_writer(fd, _resolve, ready)
            try:
                await ready
            finally:
                loop.remove_writer(fd)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
