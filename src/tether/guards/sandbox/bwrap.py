"""The bubblewrap backend: Linux namespaces, no daemon, a few milliseconds per command.

Each command runs as an unprivileged user in fresh user, PID, network, IPC, UTS and
cgroup namespaces, on a read-only minimal root (``/usr`` and a few files of ``/etc``),
with capped in-memory ``/tmp``, ``/dev/shm`` and ``/run``, the work copy as the only
other writable folder, no capabilities, a seccomp allowlist and per-process rlimits. The
work copy lives for the whole session in a memory file system capped at ``work_bytes``
(see ``_session``); each command's sandbox is made ahead of the command, and everything
a command starts is killed when it ends. See docs/sandbox.md for why each flag is there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from tether.errors import ConfigError
from tether.guards.sandbox import _cgroup, seccomp
from tether.guards.sandbox._hostcheck import enforcement
from tether.guards.sandbox._hostcheck import probe as _probe
from tether.guards.sandbox._session import CommandSandbox, Holder, settle
from tether.guards.sandbox.base import (
    Enforcement,
    ExecResult,
    SandboxLimits,
    SandboxUnavailable,
    check_argv,
)

NOBODY = 65534
ROOT_DIRS = ("bin", "sbin", "lib", "lib64", "lib32", "libx32")
"""Top-level folders recreated as the host has them: symlinks into /usr, or read-only binds."""
ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "nsswitch.conf",
    "localtime",
    "hosts",
)
"""The only parts of the host's /etc the sandbox sees (the loader, tool links, time zone)."""
_PASSWD = "root:x:0:0:root:/tmp:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/tmp:/bin/sh\n"
_GROUP = "root:x:0:\nnogroup:x:65534:\n"
_RUN_BYTES = 1 << 20


class SessionCopy:
    """Where a bubblewrap sandbox's work copy is: a memory file system inside the
    sandbox's holder, reachable from the host through ``/proc/PID/root`` while open."""

    def __init__(self, source: Path | None, ignore: Sequence[str], mount_point: str) -> None:
        self.source = source
        self.ignore = tuple(ignore)
        self.mount_point = mount_point
        self.holder_pid: int | None = None

    @property
    def path(self) -> Path:
        """The work copy as the host sees it (read it as untrusted: it may hold links)."""
        if self.holder_pid is None:
            raise RuntimeError("the work copy is not created yet")
        return Path(f"/proc/{self.holder_pid}/root") / self.mount_point.lstrip("/")


class BubblewrapSandbox:
    """Runs commands with bubblewrap (``bwrap``) in a throwaway copy of ``source``.

    ``source=None`` gives an empty work folder. The copy is made on first use (or
    ``await sandbox.open()``) and deleted by ``aclose()``; use ``async with``.
    ``mount_point`` is where the copy appears inside; ``ro_binds`` maps extra host
    folders read-only (host path -> sandbox path). When tether runs as root, bwrap is
    started as ``uid`` (default nobody) so that the process limit applies and the
    sandbox owns no host file. ``cgroup_parent`` names a delegated cgroup v2 folder for
    per-command cgroups (default: tether's own cgroup, when it may create children);
    ``cgroups`` says when to use them: ``None`` (default) only where a memory, pids or
    cpu controller binds, ``True`` wherever one can be made (for the kill alone: the PID
    namespace kill already ends everything, and moving a process into a cgroup costs
    milliseconds), ``False`` never.
    ``prepare=False`` starts each command's sandbox only when the command comes (slower,
    one process fewer while idle).
    """

    name = "bubblewrap"
    isolated = True

    def __init__(
        self,
        source: Path | str | None = None,
        *,
        limits: SandboxLimits | None = None,
        mount_point: str = "/work",
        ro_binds: Sequence[tuple[str, str]] = (),
        ignore: Sequence[str] = (),
        uid: int = NOBODY,
        bwrap: str = "bwrap",
        cgroup_parent: Path | str | None = None,
        cgroups: bool | None = None,
        prepare: bool = True,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.mount_point = mount_point
        self.ro_binds = tuple(ro_binds)
        self.bwrap = bwrap
        self.run_as = uid if os.geteuid() == 0 else None
        self.work = SessionCopy(Path(source) if source is not None else None, ignore, mount_point)
        self.passwd, self.group = _PASSWD, _GROUP
        self.prepare = prepare
        self._cgroup_parent = Path(cgroup_parent) if cgroup_parent is not None else None
        self._use_cgroups = cgroups
        self._cgroups: _cgroup.CgroupSupport | None = None
        self._available: bool | None = None
        self._open_lock = asyncio.Lock()
        self._holder: Holder | None = None
        self._ready: CommandSandbox | None = None
        self._preparing: asyncio.Task[None] | None = None
        self._running: set[CommandSandbox] = set()

    @property
    def source(self) -> Path | None:
        return self.work.source

    @property
    def ignore(self) -> tuple[str, ...]:
        return self.work.ignore

    # --- what this host offers -------------------------------------------------------------

    def available(self) -> bool:
        """Whether bwrap, nsenter and libseccomp are here and bwrap can nest its
        namespaces (tried once)."""
        if self._available is None:
            self._available = seccomp.supported() and _probe(self)
        return self._available

    def seccomp_filter(self) -> bytes:
        return seccomp.build_filter()

    @property
    def enforcement(self) -> Enforcement:
        """Which caps bind here (cgroup delegation is found out once)."""
        return enforcement(self.limits, self._cgroup_support())

    # --- command lines (pure) --------------------------------------------------------------

    def holder_argv(self, *, info_fd: int, passwd_fd: int, group_fd: int) -> list[str]:
        """The holder's bwrap options: a user and mount namespace whose work folder is a
        memory file system capped at ``work_bytes`` (the command follows ``--``)."""
        args = [self.bwrap, "--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]
        args += ["--die-with-parent", "--info-fd", str(info_fd)]
        args += _root_args()
        for name in ETC_FILES:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += ["--perms", "0444", "--file", str(passwd_fd), "/etc/passwd"]
        args += ["--perms", "0444", "--file", str(group_fd), "/etc/group"]
        for host_path, sandbox_path in self.ro_binds:
            args += ["--ro-bind", host_path, sandbox_path]
        # what a nested bwrap needs to build a command sandbox; no command runs here
        args += ["--bind", "/proc", "/proc", "--dev-bind", "/dev", "/dev", "--dir", "/tmp"]
        args += ["--size", str(self.limits.work_bytes), "--tmpfs", self.mount_point]
        args += ["--chdir", self.mount_point]
        return args

    def sandbox_argv(self, *, seccomp_fd: int | None, info_fd: int | None = None) -> list[str]:
        """A command sandbox's bwrap options, as run inside the holder (the command
        follows ``--``)."""
        limits = self.limits
        args = [self.bwrap]
        # namespaces and identity
        args += ["--unshare-user", "--unshare-pid", "--as-pid-1", "--unshare-net", "--unshare-ipc"]
        args += ["--unshare-uts", "--unshare-cgroup-try", "--disable-userns"]
        args += ["--uid", str(NOBODY), "--gid", str(NOBODY), "--hostname", "sandbox"]
        args += ["--cap-drop", "ALL", "--new-session", "--die-with-parent"]
        if seccomp_fd is not None:
            args += ["--seccomp", str(seccomp_fd)]
        if info_fd is not None:
            args += ["--info-fd", str(info_fd)]
        # read-only minimal root
        args += _root_args()
        for name in (*ETC_FILES, "passwd", "group"):
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        for _host_path, sandbox_path in self.ro_binds:
            args += ["--ro-bind", sandbox_path, sandbox_path]
        # every writable in-memory mount is capped; /dev itself is read-only
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--size", str(limits.shm_bytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
        args += ["--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
        args += ["--size", str(_RUN_BYTES), "--tmpfs", "/run"]
        # the work copy (the holder's capped memory file system); the root turns read-only
        args += ["--bind", self.mount_point, self.mount_point, "--remount-ro", "/"]
        args += ["--chdir", self.mount_point]
        return args

    def argv(
        self, command: Sequence[str], *, seccomp_fd: int | None, info_fd: int | None = None
    ) -> list[str]:
        """The bwrap command line that runs ``command`` in a command sandbox, as run inside
        the holder (pure; ``run()`` passes the command through a pipe instead)."""
        script = self.limits.ulimit_script()
        return [
            *self.sandbox_argv(seccomp_fd=seccomp_fd, info_fd=info_fd),
            "--", "/bin/bash", "-c", script, "tether-sandbox", *command,
        ]  # fmt: skip

    def boot_script(self, *, request_fd: int, close_fds: Sequence[int]) -> str:
        """What a prepared command sandbox runs: set the rlimits, close tether's
        descriptors, wait for the argv (NUL-terminated items on ``request_fd``), exec it."""
        closes = " ".join(f"{fd}>&-" for fd in close_fds)
        return (
            f"{self.limits.ulimits()} || exit 125\n"
            f"exec {closes}\n"
            f"mapfile -d '' -t argv <&{request_fd} || exit 125\n"
            f"exec {request_fd}<&-\n"
            '[ "${#argv[@]}" -gt 0 ] || exit 0\n'
            'exec "${argv[@]}"\n'
        )

    # --- life cycle ----------------------------------------------------------------------------

    async def open(self) -> Path:
        """Start the session (the holder and the copy) now, else the first run does;
        return the copy's host path."""
        async with self._open_lock:
            if self._holder is None:
                source = self.work.source
                if source is not None and not source.is_dir():
                    raise ConfigError(f"the sandbox source {source} is not a folder")
                if not self.available():
                    raise SandboxUnavailable(_UNAVAILABLE)
                self._holder = await Holder.start(self)
                self.work.holder_pid = self._holder.pid
                self._prepare_next()
        return self.work.path

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the kill is part of the result)
        stdin: bytes | None = None,
    ) -> ExecResult:
        command = check_argv(argv)
        if not self.available():
            raise SandboxUnavailable(_UNAVAILABLE)
        await self.open()
        started = time.monotonic()
        sandbox = await self._take()
        self._running.add(sandbox)
        try:
            try:
                await sandbox.send(command)
            except BaseException:
                await asyncio.shield(sandbox.discard())
                raise
            result = await sandbox.running.collect(
                timeout=timeout if timeout is not None else self.limits.timeout_seconds,
                max_chars=self.limits.max_output_chars,
                stdin=stdin,
                terminate=sandbox.terminate,
                cleanup=sandbox.kill_all,
                started=started,
            )
        finally:
            self._running.discard(sandbox)
            self._prepare_next()
        if result.exit_code == 1 and result.stderr.startswith(("bwrap:", "nsenter:")):
            raise SandboxUnavailable(
                f"bubblewrap could not create the sandbox: {result.stderr.strip()}"
            )
        return dataclasses.replace(result, enforcement=self.enforcement)

    async def aclose(self) -> None:
        """Kill every command still running, drop the prepared sandbox, end the holder:
        the work copy goes with it."""
        holder, self._holder = self._holder, None
        self.work.holder_pid = None
        if self._preparing is not None:  # never cut a start short: it drops what it made
            await asyncio.wait({self._preparing})
            self._preparing = None
        ready, self._ready = self._ready, None
        if ready is not None:
            await ready.discard()
        for sandbox in list(self._running):
            await sandbox.terminate()
        if holder is not None:
            await holder.stop()
        await settle()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- prepared command sandboxes -------------------------------------------------------

    async def _take(self) -> CommandSandbox:
        preparing = self._preparing
        if self._ready is None and preparing is not None and not preparing.done():
            await asyncio.wait({preparing})  # one being made: quicker than a second one
        ready, self._ready = self._ready, None
        if ready is not None and ready.usable():
            return ready
        if ready is not None:
            await ready.discard()
        return await self._start_sandbox()

    async def _start_sandbox(self) -> CommandSandbox:
        holder = self._holder
        if holder is None or not holder.alive():
            raise SandboxUnavailable("the sandbox's session has ended: open it again")
        return await CommandSandbox.start(self, holder, self._cgroup_support())

    def _cgroup_support(self) -> _cgroup.CgroupSupport:
        """Where per-command cgroups are made, found once; none when they are not used."""
        if self._cgroups is None:
            found = _cgroup.detect(self._cgroup_parent)
            use = self._use_cgroups
            if use is False or (use is None and not found.controllers):
                reason = found.reason or "per-command cgroups are turned off"
                found = _cgroup.CgroupSupport(None, frozenset(), reason)
            self._cgroups = found
        return self._cgroups

    def _prepare_next(self) -> None:
        """Start the next command's sandbox in the background, if none is waiting."""
        if not self.prepare or self._holder is None or self._ready is not None:
            return
        if self._preparing is not None and not self._preparing.done():
            return
        self._preparing = asyncio.ensure_future(self._prepare())

    async def _prepare(self) -> None:
        try:
            sandbox = await self._start_sandbox()
        except Exception:  # best effort: the next run starts its own, and reports the error
            return
        if self._holder is None or self._ready is not None:
            await sandbox.discard()
        else:
            self._ready = sandbox


_UNAVAILABLE = (
    "bubblewrap cannot isolate commands here (it, nsenter or libseccomp is missing, or user "
    "namespaces are disabled): install the Debian packages 'bubblewrap' and 'libseccomp2' "
    "or choose another sandbox"
)


def _root_args() -> list[str]:
    """/usr read-only, and /bin, /lib... as the host has them (symlinks or read-only)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ROOT_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{name}"]
    return args
