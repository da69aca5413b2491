"""Command sandboxes made ahead of the commands, and every one of them accounted for.

A :class:`SandboxPool` keeps ``size`` sandboxes ready (started, waiting for an argv), so a
burst of parallel calls, or a stream of calls back to back, takes one that is ready and
pays no preparation on its path. Those taken are replaced at once where cores are idle
(as many as are idle), so that a long stream does not run the pool dry; the rest once
the calls pause (no command running for ``REFILL_AFTER_S``, or a command running for
``BUSY_REFILL_AFTER_S``), so that making them does not compete for the CPU with the
calls. A call that finds none ready has one made at once, and the whole pool is
refilled then: a stream that outran the pool goes on, and the next calls find theirs.

Every sandbox is tracked from the moment it starts being made until it is discarded:
being made (a task), ready, or handed out. :meth:`SandboxPool.close` refuses new takes,
waits for those being made (a start is never cut short: what it made is dropped), and
kills the ready and the handed-out ones, so no command can start once it has returned.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Awaitable, Callable

from tether.guards.sandbox._aio import background
from tether.guards.sandbox._session import CommandSandbox

REFILL_AFTER_S = 0.01
"""Time without a command after which the pool is topped up."""
BUSY_REFILL_AFTER_S = 0.5
"""Time after which the pool is topped up while a (long) command runs."""


_CORES = len(os.sched_getaffinity(0))


def idle_cores() -> int:
    """Cores that no runnable task waits for right now (the kernel's count of runnable
    tasks, which includes the caller, against the cores); 0 where it cannot be read."""
    try:
        with open("/proc/loadavg", "rb") as loadavg:
            running = int(loadavg.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return 0
    return max(_CORES - running, 0)


class PoolClosed(Exception):
    """The pool was closed: no sandbox is handed out any more."""


class SandboxPool:
    """Prepared command sandboxes; ``make`` starts one."""

    def __init__(self, make: Callable[[], Awaitable[CommandSandbox]], size: int) -> None:
        self._start = make
        self.size = size
        """How many sandboxes are kept ready (0: each is made when a command comes)."""
        self.closed = False
        self._ready: deque[CommandSandbox] = deque()
        self._making: set[asyncio.Task[CommandSandbox]] = set()
        self._waiters: deque[asyncio.Future[CommandSandbox]] = deque()
        self._taken: set[CommandSandbox] = set()
        self._top_up: asyncio.TimerHandle | None = None

    @property
    def tracked(self) -> int:
        """Sandboxes being made, ready, or handed out."""
        return len(self._making) + len(self._ready) + len(self._taken)

    def fill(self) -> None:
        """Start making sandboxes until ``size`` are ready or being made, and one for
        each caller waiting beyond that."""
        if self.closed:
            return
        wanted = max(self.size - len(self._ready), 0) + len(self._waiters)
        self._make(wanted - len(self._making))

    def _make(self, count: int) -> None:
        for _ in range(count):
            task = asyncio.ensure_future(self._start())
            self._making.add(task)
            task.add_done_callback(self._made)

    def _fill_when_quiet(self) -> None:
        if self._top_up is not None:
            self._top_up.cancel()
        delay = BUSY_REFILL_AFTER_S if self._taken else REFILL_AFTER_S
        self._top_up = asyncio.get_running_loop().call_later(delay, self.fill)

    async def filled(self) -> None:
        """Top the pool up now and wait until no sandbox is being made."""
        self.fill()
        while self._making and not self.closed:
            await asyncio.wait(set(self._making))

    async def take(self) -> CommandSandbox:
        """A ready sandbox (a dead one is dropped), else the next one made."""
        if self.closed:
            raise PoolClosed
        while self._ready:
            sandbox = self._ready.popleft()
            if sandbox.usable():
                return self._hand_out(sandbox)
            background(sandbox.discard())
        waiter: asyncio.Future[CommandSandbox] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self.fill()  # one for each caller waiting; a stream outran the pool: refill it now
        try:
            sandbox = await waiter
        except asyncio.CancelledError:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            elif waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._ready.appendleft(waiter.result())  # handed to us as we were cancelled
            raise
        return self._hand_out(sandbox)

    def release(self, sandbox: CommandSandbox) -> None:
        """The command of ``sandbox`` is over (its processes killed); make the next one."""
        self._taken.discard(sandbox)
        self._fill_when_quiet()

    async def close(self) -> None:
        """Refuse new takes; wait for the sandboxes being made; kill every one."""
        self.closed = True
        if self._top_up is not None:
            self._top_up.cancel()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(PoolClosed())
        drop: list[CommandSandbox] = []
        while self._making:
            making = set(self._making)
            await asyncio.wait(making)
            self._making -= making
            drop += [t.result() for t in making if not t.cancelled() and t.exception() is None]
        drop += self._ready
        self._ready.clear()
        ending = [sandbox.discard() for sandbox in drop]
        ending += [sandbox.terminate() for sandbox in list(self._taken)]
        await asyncio.gather(*ending, return_exceptions=True)

    def _hand_out(self, sandbox: CommandSandbox) -> CommandSandbox:
        self._taken.add(sandbox)
        missing = self.size - len(self._ready) - len(self._making)
        if missing > 0 and (idle := idle_cores() - len(self._making)) > 0:
            self._make(min(missing, idle))  # alongside the calls, on cores left idle
        self._fill_when_quiet()
        return sandbox

    def _made(self, task: asyncio.Task[CommandSandbox]) -> None:
        if self.closed:
            return  # close() waits for it and drops what it made
        self._making.discard(task)
        if task.cancelled():
            return
        failed = task.exception()
        waiter = self._next_waiter()
        if failed is not None:  # the next caller waiting hears why
            if waiter is not None:
                waiter.set_exception(failed)
            return
        if waiter is not None:
            waiter.set_result(task.result())
        else:
            self._ready.append(task.result())

    def _next_waiter(self) -> asyncio.Future[CommandSandbox] | None:
        """The first caller still waiting (one cancelled meanwhile is skipped)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                return waiter
        return None
