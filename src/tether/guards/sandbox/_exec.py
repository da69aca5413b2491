"""Run one process: feed its stdin, read both streams incrementally under a cap, see its
exit apart from its pipes, and kill what it left behind. Shared by every backend."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tether.guards.sandbox._output import CappedText
from tether.guards.sandbox.base import TIMEOUT_EXIT_CODE, ExecResult

_CHUNK = 64 * 1024
_DRAIN_GRACE_S = 1.0
_KILL_WAIT_S = 10.0

Hook = Callable[[], Awaitable[None]]


class _Protocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Streams as usual, plus a future set when the process exits, pipes open or not
    (``Process.wait()`` also waits for every pipe to close)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=_CHUNK, loop=loop)
        self.exited: asyncio.Future[None] = loop.create_future()

    def process_exited(self) -> None:
        super().process_exited()
        if not self.exited.done():
            self.exited.set_result(None)


class Running:
    """A started process: its pipes, its exit, and how to collect its result."""

    def __init__(self, transport: asyncio.SubprocessTransport, protocol: _Protocol) -> None:
        self.transport = transport
        self.protocol = protocol
        self.process = asyncio.subprocess.Process(transport, protocol, asyncio.get_running_loop())
        self.pid: int = transport.get_pid()

    @property
    def exited(self) -> asyncio.Future[None]:
        return self.protocol.exited

    def kill_group(self) -> None:
        """SIGKILL the process group the process leads (it was started in a new session)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    async def wait_exit(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.exited), seconds)

    async def collect(
        self,
        *,
        timeout: float,  # noqa: ASYNC109 (a timeout kills and is reported, not raised)
        max_chars: int,
        stdin: bytes | None = None,
        terminate: Hook | None = None,
        cleanup: Hook | None = None,
        started: float | None = None,
    ) -> ExecResult:
        """Wait for the process, at most ``timeout`` seconds, and return its result.

        On timeout or cancellation ``terminate`` kills everything (default: the process
        group). When the process exits by itself ``cleanup`` kills what it left behind
        (default: the process group). Either way the process group is killed last.
        """
        begin = time.monotonic() if started is None else started
        out, err = CappedText(max_chars), CappedText(max_chars)
        proc = self.process
        feeding = asyncio.ensure_future(_feed(proc.stdin, stdin))
        pumps = [
            asyncio.ensure_future(_pump(proc.stdout, out)),
            asyncio.ensure_future(_pump(proc.stderr, err)),
        ]
        timed_out = False
        try:
            done, _ = await asyncio.wait({self.exited}, timeout=timeout)
            if done:
                await (cleanup or self._kill_group_hook)()
            else:
                timed_out = True
                await (terminate or self._terminate)()
            # the streams end when the last process holding them is gone
            _, pending = await asyncio.wait(pumps, timeout=_DRAIN_GRACE_S)
            for task in pending:
                task.cancel()
        except BaseException:
            await asyncio.shield((terminate or self._terminate)())
            for task in pumps:
                task.cancel()
            raise
        finally:
            feeding.cancel()
            self.kill_group()  # stragglers that left the command but kept its group
            self.transport.close()
        code = self.transport.get_returncode()
        return ExecResult(
            exit_code=_exit_code(code, timed_out),
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            stdout_omitted=out.omitted,
            stderr_omitted=err.omitted,
            duration_seconds=time.monotonic() - begin,
        )

    async def _kill_group_hook(self) -> None:
        self.kill_group()

    async def _terminate(self) -> None:
        self.kill_group()
        await self.wait_exit(_KILL_WAIT_S)


async def start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    pass_fds: Sequence[int] = (),
    user: int | None = None,
    group: int | None = None,
) -> Running:
    """Start ``argv`` in a new session with three pipes.

    A cancellation does not interrupt the start (asyncio would then wait for the pipes of
    a half-started process tree): the process is started, its group killed, and the
    cancellation goes on.
    """
    loop = asyncio.get_running_loop()
    extra: dict[str, Any] = {}
    if user is not None:
        extra.update(user=user, group=group, extra_groups=[])
    spawn = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: _Protocol(loop),
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            pass_fds=tuple(pass_fds),
            start_new_session=True,
            **extra,
        )
    )
    try:
        transport, protocol = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        await asyncio.wait({spawn})
        if not spawn.cancelled() and spawn.exception() is None:
            started, _ = spawn.result()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(started.get_pid(), signal.SIGKILL)
            started.close()
        raise
    return Running(transport, protocol)


async def execute(
    argv: Sequence[str],
    *,
    timeout: float,  # noqa: ASYNC109 (a timeout kills and is reported, not raised)
    max_chars: int,
    env: Mapping[str, str],
    cwd: Path | None = None,
    stdin: bytes | None = None,
    pass_fds: Sequence[int] = (),
    user: int | None = None,
    group: int | None = None,
    on_kill: Hook | None = None,
) -> ExecResult:
    """Start ``argv`` and collect it (see :meth:`Running.collect`); on timeout or
    cancellation the process group is killed, then ``on_kill`` runs (a container engine
    removes its container there)."""
    started = time.monotonic()
    running = await start(argv, env=env, cwd=cwd, pass_fds=pass_fds, user=user, group=group)

    async def terminate() -> None:
        await running._terminate()
        if on_kill is not None:
            await on_kill()

    return await running.collect(
        timeout=timeout, max_chars=max_chars, stdin=stdin, terminate=terminate, started=started
    )


def _exit_code(code: int | None, timed_out: bool) -> int:
    """One exit code for a timeout, whoever reports the kill (the process, or its shell as
    128 + 9): the race between them must not show."""
    if timed_out or code is None:
        return TIMEOUT_EXIT_CODE
    return code


async def _feed(writer: asyncio.StreamWriter | None, data: bytes | None) -> None:
    """Write ``data`` (if any) to the process's stdin, then close it: EOF for readers."""
    if writer is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        if data:
            writer.write(data)
            await writer.drain()
        writer.close()


async def _pump(stream: asyncio.StreamReader | None, sink: CappedText) -> None:
    if stream is None:
        return
    while chunk := await stream.read(_CHUNK):
        sink.feed(chunk)
    sink.feed(b"", final=True)
