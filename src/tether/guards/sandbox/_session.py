"""The bubblewrap session: a holder that keeps the work copy, and command sandboxes
started inside it ahead of their commands.

The **holder** is a bwrap with only a user and a mount namespace, root in it with
``CAP_SYS_ADMIN`` alone, so that it mounts its work folder itself: a memory file system
capped at ``work_bytes`` and ``work_inodes`` (bwrap cannot pass ``nr_inodes``), filled
from a tar stream of the source. No command runs in it: it only keeps the copy alive
between commands, and gives each command sandbox the folders to bind.

A **command sandbox** is entered into the holder's namespaces (see ``_enter``), mounts
its own capped scratch space (``/tmp``, ``/dev/shm``, ``/run``) in a mount namespace of
its own, and is a complete, fresh bubblewrap sandbox (its own user, PID, network, IPC,
UTS and cgroup namespaces, mounts, seccomp filter): each command gets a new one; only
the copy is shared. It is started ahead of time, says when it is up, waits for its argv
on a pipe, and when it gets it runs the command; its PID 1 is known (``--info-fd``) and
held by a pidfd before the command starts, so that when the command ends (or is
cancelled, or times out) its whole PID namespace, and its cgroup where there is one, is
killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tether.errors import ConfigError
from tether.guards.sandbox._aio import (
    background,
    data_fd,
    read_child_pid,
    wait_readable,
    write_all,
)
from tether.guards.sandbox._cgroup import (
    CgroupSupport,
    CommandCgroup,
    SessionCgroup,
    kill_folder,
    own_scope_of,
)
from tether.guards.sandbox._copy import write_tree
from tether.guards.sandbox._enter import drops_root, enter_argv
from tether.guards.sandbox._exec import Running, start
from tether.guards.sandbox._systemd import scope_argv
from tether.guards.sandbox.base import DEFAULT_ENV, SandboxUnavailable

if TYPE_CHECKING:
    from tether.guards.sandbox.bwrap import BubblewrapSandbox

_KILL_WAIT_S = 5.0
_MOUNT_WORK = "mount -t tmpfs -o size={size},nr_inodes={inodes},mode=0755 tether-work {work}"
_HOLD = (
    "{mount} || exit 3; cd {work} || exit 3; "
    "tar -x -f - -p --no-same-owner --delay-directory-restore <&{fd} || exit 3; "
    "exec {fd}<&-; echo ready; read -r _"
)
"""The holder: mount the capped work folder, unpack the tree from ``fd`` into it, say so,
wait until stdin closes."""


class Holder:
    """The bwrap that holds the work copy (a size-capped memory file system)."""

    def __init__(self, running: Running, pid: int, pidfd: int, ns_fds: tuple[int, int]) -> None:
        self.running = running
        self.pid = pid
        """The process inside the holder's namespaces (a host PID: no PID namespace)."""
        self.pidfd = pidfd
        self.ns_fds = ns_fds
        """Descriptors of its user and mount namespaces, to enter them."""

    @classmethod
    async def start(cls, box: BubblewrapSandbox, cgroup: SessionCgroup | None = None) -> Holder:
        """Start the holder (in ``cgroup``'s ``holder/`` before it forks, if given)."""
        info_r, info_w = os.pipe()
        tar_r, tar_w = os.pipe()
        data = [data_fd(text) for text in (box.passwd, box.group)]
        child_fds = [info_w, tar_r, *data]
        argv = box.holder_argv(info_fd=info_w, passwd_fd=data[0], group_fd=data[1])
        hold = _HOLD.format(mount=mount_work(box), work=shlex.quote(box.mount_point), fd=tar_r)
        argv += ["--", "/bin/bash", "-c", hold, "tether-holder"]
        gate_r = gate_w = -1
        if cgroup is not None:
            gate_r, gate_w = os.pipe()
            child_fds.append(gate_r)
            argv = ["/bin/bash", "-c", f'read -r _ <&{gate_r} && exec "$@"', "gate", *argv]
        try:
            running = await start(
                argv,
                env=DEFAULT_ENV,
                pass_fds=child_fds,
                user=box.run_as,
                group=box.run_as,
            )
            if cgroup is not None:
                try:
                    cgroup.adopt_holder(running.pid)
                    os.write(gate_w, b"go\n")
                except BaseException:
                    running.kill_group()
                    running.transport.close()
                    raise
        finally:
            for fd in (*child_fds, gate_w):
                if fd >= 0:
                    os.close(fd)
        try:
            copying = asyncio.to_thread(write_tree, box.source, box.ignore, tar_w)
            tar_w = -1
            copied = asyncio.ensure_future(copying)
            pid = await read_child_pid(info_r)
            pidfd = os.pidfd_open(pid)  # bwrap waits for it: not reaped, not reused
            assert running.process.stdout is not None
            line = await running.process.stdout.readline()
            if line.strip() != b"ready":
                await asyncio.wait({copied})
                if (failed := copied.exception()) is not None and not isinstance(
                    failed, BrokenPipeError
                ):
                    raise failed  # the source could not be read: say which file
                await running.wait_exit(_KILL_WAIT_S)
                raise _holder_failure(box, await _stderr(running))
            await copied
            ns_fds = (
                os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC),
                os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC),
            )
        except BaseException:
            running.kill_group()
            running.transport.close()
            raise
        finally:
            os.close(info_r)
            if tar_w >= 0:
                os.close(tar_w)
        return cls(running, pid, pidfd, ns_fds)

    def alive(self) -> bool:
        return not self.running.exited.done()

    async def stop(self) -> None:
        """End the holder; the memory file system, and the copy, go with it."""
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        self.running.kill_group()
        await wait_readable(self.pidfd, _KILL_WAIT_S)  # readable once it has exited
        await self.running.wait_exit(_KILL_WAIT_S)
        self.running.transport.close()
        for fd in (self.pidfd, *self.ns_fds):
            with contextlib.suppress(OSError):
                os.close(fd)


class CommandSandbox:
    """One fresh command sandbox, started ahead and waiting for its argv."""

    def __init__(
        self,
        running: Running,
        request_fd: int,
        argv_fd: int,
        info_fd: int,
        ready_fd: int,
        cgroup: CommandCgroup | None,
    ) -> None:
        self.running = running
        self.cgroup = cgroup
        self._request_fd = request_fd
        self._argv_fd = argv_fd
        self._info_fd = info_fd
        self._ready_fd = ready_fd
        self._scoped = False
        self._pid1: asyncio.Future[int | None] = asyncio.ensure_future(self._learn_pid1())
        self._pidfd: int | None = None
        self._scope: Path | None = None
        """The systemd scope the command runs in, if any."""
        self._killing = asyncio.Lock()

    @classmethod
    async def start(
        cls, box: BubblewrapSandbox, holder: Holder, cgroups: CgroupSupport
    ) -> CommandSandbox:
        request_r, request_w = os.pipe()
        # the argv is read from a file: bash reads a pipe one byte per system call
        argv_fd = os.memfd_create("tether-argv", os.MFD_CLOEXEC)
        info_r, info_w = os.pipe()
        ready_r, ready_w = os.pipe()
        seccomp_fd = data_fd(box.seccomp_filter())
        child_fds = [request_r, info_w, seccomp_fd, ready_w]
        cgroup = CommandCgroup(cgroups, box.limits) if cgroups.parent is not None else None
        gate_r = gate_w = -1
        if cgroup is not None:
            gate_r, gate_w = os.pipe()
            child_fds.append(gate_r)
        boot = box.boot_script(
            request_fd=request_r,
            argv_fd=argv_fd,
            close_fds=[*child_fds[1:], *holder.ns_fds],
            ready_fd=ready_w,
        )
        # the helper becomes the sandbox's user itself where it can: no fork of tether
        user = None if drops_root() and cgroups.systemd is None else box.run_as
        argv = [
            *enter_argv(
                holder.ns_fds,
                box.limits,
                gate_fd=gate_r,
                run_as=box.run_as if user is None else None,
            ),
            *box.sandbox_argv(seccomp_fd=seccomp_fd, info_fd=info_w),
            "--", "/bin/bash", "-c", boot, "tether-sandbox",
        ]  # fmt: skip
        if cgroup is None and cgroups.systemd is not None:  # systemd-run joins its scope
            argv = [*scope_argv(cgroups.systemd, box.limits), *argv]
        try:
            running = await start(
                argv,
                env=DEFAULT_ENV,
                pass_fds=(*child_fds, argv_fd, *holder.ns_fds),
                user=user,
                group=user,
            )
            if cgroup is not None:
                cgroup.adopt(running.pid)
                os.write(gate_w, b"go\n")
        except BaseException:
            for fd in (request_w, argv_fd, info_r, ready_r):
                os.close(fd)
            if cgroup is not None:
                await cgroup.remove()
            raise
        finally:
            for fd in (*child_fds, gate_w):
                if fd >= 0:
                    os.close(fd)
        sandbox = cls(running, request_w, argv_fd, info_r, ready_r, cgroup)
        sandbox._scoped = cgroups.systemd is not None
        return sandbox

    def usable(self) -> bool:
        """Not started a command yet, and still alive."""
        return self._request_fd >= 0 and not self.running.exited.done()

    async def send(self, argv: Sequence[str]) -> bool:
        """Give the sandbox its argv (it starts right away). False when the sandbox died
        before it could take it (its stderr says why)."""
        pid1 = await self._pid1
        fd, argv_fd = self._request_fd, self._argv_fd
        if fd < 0:  # killed meanwhile (the session was closed): nothing runs
            return False
        self._close_request()
        if pid1 is None:
            return False
        data = b"".join(arg.encode() + b"\0" for arg in argv)
        try:
            written = 0
            while written < len(data):  # at offset 0, which the sandbox reads from
                written += os.pwrite(argv_fd, data[written:], written)
            await write_all(fd, b"\n")  # go
        except (BrokenPipeError, ConnectionResetError):
            return False
        finally:
            os.close(fd)
            os.close(argv_fd)
        return True

    def _close_request(self, *, close: bool = False) -> None:
        """Forget the request descriptors (closing them with ``close``)."""
        if close:
            for fd in (self._request_fd, self._argv_fd):
                if fd >= 0:
                    os.close(fd)
        self._request_fd = self._argv_fd = -1

    async def kill_all(self, *, remove_cgroup: bool = False) -> None:
        """Kill the sandbox's PID 1, hence its whole PID namespace, and its cgroup; wait
        until PID 1 is gone (it exits last of its namespace). The emptied cgroup is
        removed in the background, or now with ``remove_cgroup``."""
        async with self._killing:  # the command's end and a close may both come here
            await self._kill_all(remove_cgroup=remove_cgroup)

    async def _kill_all(self, *, remove_cgroup: bool) -> None:
        self._close_request(close=True)  # an unused sandbox: its boot script exits
        if not self._pid1.done():  # bwrap reports it right after making it: wait for it
            await asyncio.wait({self._pid1}, timeout=_KILL_WAIT_S)
        if not self._pid1.done():
            self._pid1.cancel()
            await asyncio.wait({self._pid1})  # its own cleanup runs; never raises here
        self._close_info()
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        if self.cgroup is not None:
            self.cgroup.kill()
        if self._scope is not None:
            kill_folder(self._scope)
        if self._pidfd is not None:
            await wait_readable(self._pidfd, _KILL_WAIT_S)  # PID 1 exits last of its namespace
            os.close(self._pidfd)
            self._pidfd = None
        if self.cgroup is not None:
            if remove_cgroup:
                await self.cgroup.remove()
            else:
                background(self.cgroup.remove())

    async def terminate(self) -> None:
        """Timeout or cancellation: kill everything, bwrap included."""
        await self.kill_all(remove_cgroup=True)
        self.running.kill_group()
        await self.running.wait_exit(_KILL_WAIT_S)

    async def discard(self) -> None:
        """Drop an unused sandbox."""
        await self.terminate()
        self.running.transport.close()

    async def failure(self) -> str:
        """Why a sandbox that could not take its argv died (bwrap's words); drops it."""
        await self.running.wait_exit(_KILL_WAIT_S)
        said = (await _stderr(self.running)).strip()
        await self.discard()
        return said or f"it exited with status {self.running.transport.get_returncode()}"

    async def _learn_pid1(self) -> int | None:
        try:
            try:
                pid = await read_child_pid(self._info_fd)
            except (OSError, ValueError):
                return None
            finally:
                self._close_info()
            # bwrap has not reaped it (it waits for our argv): the pid is still that process
            try:
                self._pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                return None
            if self._scoped:
                self._scope = own_scope_of(pid)
            # the boot script says it is up: the sandbox is made, a command given will start
            await wait_readable(self._ready_fd, None)
            return pid if os.read(self._ready_fd, 1) == b"." else None
        finally:
            os.close(self._ready_fd)

    def _close_info(self) -> None:
        if self._info_fd >= 0:
            os.close(self._info_fd)
            self._info_fd = -1


def mount_work(box: BubblewrapSandbox) -> str:
    """The holder's command that mounts the capped work folder."""
    limits = box.limits
    return _MOUNT_WORK.format(
        size=limits.work_bytes, inodes=limits.work_inodes, work=shlex.quote(box.mount_point)
    )


async def _stderr(running: Running) -> str:
    stream = running.process.stderr
    if stream is None:
        return ""
    with contextlib.suppress(TimeoutError):
        return (await asyncio.wait_for(stream.read(4000), 1)).decode(errors="replace")
    return ""


def _holder_failure(box: BubblewrapSandbox, stderr: str) -> Exception:
    if "No space left on device" in stderr or "Wrote only" in stderr:
        limits = box.limits
        return ConfigError(
            f"the work tree does not fit in the sandbox's work space (SandboxLimits."
            f"work_bytes = {limits.work_bytes:,} bytes, work_inodes = {limits.work_inodes:,} "
            "files and folders): raise them, or ignore large folders"
        )
    return SandboxUnavailable(f"bubblewrap could not create the sandbox: {stderr.strip()}")
