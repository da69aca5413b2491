"""Run one process: read both streams incrementally under a cap, kill it all on timeout
or cancellation. Shared by every backend."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tether.guards.sandbox.base import ExecResult

_CHUNK = 64 * 1024
_DRAIN_GRACE_S = 1.0


class CappedText:
    """Keeps the first ``limit`` characters of a byte stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept: list[str] = []
        self.kept_chars = 0
        self.omitted = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        room = self.limit - self.kept_chars
        if room > 0:
            head = text[:room]
            self.kept.append(head)
            self.kept_chars += len(head)
            text = text[room:]
        self.omitted += len(text)

    def text(self) -> str:
        body = "".join(self.kept)
        return f"{body}\n[{self.omitted} characters omitted]" if self.omitted else body


async def _pump(stream: asyncio.StreamReader | None, sink: CappedText) -> None:
    if stream is None:
        return
    while chunk := await stream.read(_CHUNK):
        sink.feed(chunk)
    sink.feed(b"", final=True)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def execute(
    argv: Sequence[str],
    *,
    timeout: float,  # noqa: ASYNC109 (a timeout kills and is reported, not raised)
    max_chars: int,
    env: Mapping[str, str],
    cwd: Path | None = None,
    pass_fds: Sequence[int] = (),
    user: int | None = None,
    group: int | None = None,
    on_kill: Callable[[], Awaitable[None]] | None = None,
    kill_first: Callable[[], None] | None = None,
) -> ExecResult:
    """Start ``argv`` in a new session and wait for it, at most ``timeout`` seconds.

    On timeout or cancellation ``kill_first`` runs (bubblewrap kills its PID namespace
    there), then the whole process group is killed with SIGKILL, then ``on_kill`` runs (a
    container engine removes its container there).
    """
    started = time.monotonic()
    extra: dict[str, Any] = {}
    if user is not None:
        extra.update(user=user, group=group, extra_groups=[])
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        pass_fds=tuple(pass_fds),
        start_new_session=True,
        **extra,
    )
    out, err = CappedText(max_chars), CappedText(max_chars)
    pumps = [
        asyncio.ensure_future(_pump(proc.stdout, out)),
        asyncio.ensure_future(_pump(proc.stderr, err)),
    ]
    waiter = asyncio.ensure_future(proc.wait())
    timed_out = False
    try:
        done, _ = await asyncio.wait({waiter}, timeout=timeout)
        if not done:
            timed_out = True
            await _kill(proc.pid, waiter, on_kill, kill_first)
        # the streams end when the last process holding them is gone
        _, pending = await asyncio.wait(pumps, timeout=_DRAIN_GRACE_S)
        for task in pending:
            task.cancel()
    except BaseException:
        await asyncio.shield(_kill(proc.pid, waiter, on_kill, kill_first))
        for task in pumps:
            task.cancel()
        raise
    finally:
        _kill_group(proc.pid)  # stragglers that left the command but kept its group
    return ExecResult(
        exit_code=proc.returncode if proc.returncode is not None else -signal.SIGKILL,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        stdout_omitted=out.omitted,
        stderr_omitted=err.omitted,
        duration_seconds=time.monotonic() - started,
    )


async def _kill(
    pid: int,
    waiter: asyncio.Future[int],
    on_kill: Callable[[], Awaitable[None]] | None,
    kill_first: Callable[[], None] | None,
) -> None:
    if kill_first is not None:
        kill_first()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiter), 2)
    _kill_group(pid)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(waiter), 10)
    if on_kill is not None:
        await on_kill()
