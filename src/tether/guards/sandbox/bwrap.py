"""The bubblewrap backend: Linux namespaces, no daemon, a few milliseconds per command.

Each command runs as an unprivileged user in fresh user, PID, network, IPC, UTS and
cgroup namespaces, on a read-only minimal root (``/usr`` and a few files of ``/etc``),
with capped in-memory ``/tmp``, ``/dev/shm`` and ``/run``, the work copy as the only
other writable folder, no capabilities, a seccomp allowlist and per-process rlimits. The
work copy lives for the whole session in a memory file system capped at ``work_bytes``
and ``work_inodes`` (see ``_session``); command sandboxes are made ahead in a pool (see
``_pool``), every one tracked until it is gone, and everything a command starts is
killed when it ends. See docs/sandbox.md for why each flag is there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Self

from tether.errors import ConfigError
from tether.guards.sandbox import _cgroup, seccomp
from tether.guards.sandbox._aio import settle
from tether.guards.sandbox._enter import SCRATCH
from tether.guards.sandbox._hostcheck import enforcement
from tether.guards.sandbox._hostcheck import probe as _probe
from tether.guards.sandbox._pool import PoolClosed, SandboxPool
from tether.guards.sandbox._session import CommandSandbox, Holder
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
DEFAULT_POOL_SIZE = 4
"""Prepared command sandboxes: a turn's parallel calls each find one ready."""
_PASSWD = "root:x:0:0:root:/tmp:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/tmp:/bin/sh\n"
_GROUP = "root:x:0:\nnogroup:x:65534:\n"


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
    ``pool_size`` command sandboxes are kept prepared (default: enough for a turn's
    parallel calls), so that neither a burst nor a stream of calls waits for one to be
    made; ``prepare=False`` makes each only when its command comes (slower, fewer
    processes while idle). ``xattrs=True`` lets commands set extended attributes
    (refused by default: they cost kernel memory no size cap counts).
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
        pool_size: int = DEFAULT_POOL_SIZE,
        xattrs: bool = False,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.mount_point = mount_point
        self.ro_binds = tuple(ro_binds)
        self.bwrap = bwrap
        self.run_as = uid if os.geteuid() == 0 else None
        self.work = SessionCopy(Path(source) if source is not None else None, ignore, mount_point)
        self.passwd, self.group = _PASSWD, _GROUP
        self.prepare = prepare
        self.pool_size = pool_size if prepare else 0
        self.xattrs = xattrs
        self._cgroup_parent = Path(cgroup_parent) if cgroup_parent is not None else None
        self._use_cgroups = cgroups
        self._cgroups: _cgroup.CgroupSupport | None = None
        self._available: bool | None = None
        self._open_lock = asyncio.Lock()
        self._epoch = 0
        """Bumped by each close: a command begun before it never starts."""
        self._holder: Holder | None = None
        self._pool: SandboxPool | None = None
        self._session_cgroup: _cgroup.SessionCgroup | None = None

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
        return seccomp.build_filter(xattrs=self.xattrs)

    @property
    def enforcement(self) -> Enforcement:
        """Which caps bind here (cgroup delegation is found out once)."""
        return enforcement(self.limits, self._cgroup_support())

    # --- command lines (pure) --------------------------------------------------------------

    def holder_argv(self, *, info_fd: int, passwd_fd: int, group_fd: int) -> list[str]:
        """The holder's bwrap options: a user and mount namespace, root in it with only
        ``CAP_SYS_ADMIN``, so that it mounts the work folder itself (a memory file system
        capped at ``work_bytes`` and ``work_inodes``: bwrap cannot pass ``nr_inodes``);
        the command follows ``--``."""
        args = [self.bwrap, "--unshare-user", "--uid", "0", "--gid", "0"]
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SYS_ADMIN"]
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
        args += ["--dir", self.mount_point, "--dir", SCRATCH]
        return args

    def sandbox_argv(self, *, seccomp_fd: int | None, info_fd: int | None = None) -> list[str]:
        """A command sandbox's bwrap options, as run inside the holder (the command
        follows ``--``)."""
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
        # /tmp, /dev/shm, /run: the command's own capped scratch space; /dev is read-only
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--bind", f"{SCRATCH}/shm", "/dev/shm", "--remount-ro", "/dev"]
        args += ["--bind", f"{SCRATCH}/tmp", "/tmp", "--bind", f"{SCRATCH}/run", "/run"]
        # the work copy (the holder's capped memory file system); the root turns read-only
        args += ["--bind", self.mount_point, self.mount_point, "--remount-ro", "/"]
        args += ["--chdir", "/"]  # the boot script enters the work folder: see there
        return args

    def argv(
        self, command: Sequence[str], *, seccomp_fd: int | None, info_fd: int | None = None
    ) -> list[str]:
        """The bwrap command line that runs ``command`` in a command sandbox, as run inside
        the holder (pure; ``run()`` passes the command through a pipe instead)."""
        script = f"{self.enter_work()}\n{self.limits.ulimit_script()}"
        return [
            *self.sandbox_argv(seccomp_fd=seccomp_fd, info_fd=info_fd),
            "--", "/bin/bash", "-c", script, "tether-sandbox", *command,
        ]  # fmt: skip

    def boot_script(
        self,
        *,
        request_fd: int,
        argv_fd: int,
        close_fds: Sequence[int],
        ready_fd: int | None = None,
    ) -> str:
        """What a prepared command sandbox runs: say it is up on ``ready_fd`` (so tether
        knows a command given to it will start), set the rlimits, close tether's
        descriptors, wait for a byte on ``request_fd`` (its end: exit), enter the work
        folder (as it is now, not as it was when the sandbox was made), read the argv
        (NUL-terminated items in the file ``argv_fd``, read in blocks), exec it."""
        closes = " ".join(f"{fd}>&-" for fd in close_fds)
        ready = f"printf . >&{ready_fd} || exit 125\n" if ready_fd is not None else ""
        return (
            f"{ready}{self.limits.ulimits()} || exit 125\n"
            f"exec {closes}\n"
            f"read -r -n 1 _ <&{request_fd} || exit 0\n"
            f"{self.enter_work()}\n"
            f"mapfile -d '' -t argv <&{argv_fd} || exit 125\n"
            f"exec {request_fd}<&- {argv_fd}<&-\n"
            '[ "${#argv[@]}" -gt 0 ] || exit 0\n'
            'exec "${argv[@]}"\n'
        )

    def enter_work(self) -> str:
        """Enter the work folder from inside: bwrap starts in ``/``, so a command that
        locks the work folder (``chmod 000``) cannot stop the next one from starting,
        which is told how to undo it."""
        work = shlex.quote(self.mount_point)
        return (
            f"cd -- {work} 2>/dev/null || echo 'tether: cannot enter the work folder "
            f"{self.mount_point} (a command changed its permissions; chmod 755 "
            f"{self.mount_point} restores them): this command runs in /' >&2"
        )

    # --- life cycle ----------------------------------------------------------------------------

    async def open(self) -> Path:
        """Start the session (the holder, the copy, the pool of prepared sandboxes) now,
        else the first run does; return the copy's host path."""
        await self._session(self._epoch)
        return self.work.path

    async def prepared(self) -> None:
        """Open the session and wait until its pool of prepared sandboxes is full."""
        _, pool = await self._session(self._epoch)
        await pool.filled()

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
        epoch = self._epoch  # a close from now on refuses this command
        holder, pool = await self._session(epoch)
        started = time.monotonic()
        failures: list[str] = []
        while len(failures) < _STARTS_BEFORE_RECREATE:
            try:
                sandbox = await pool.take()
            except PoolClosed:
                raise SandboxUnavailable(_CLOSED) from None
            try:
                try:
                    sent = await sandbox.send(command)
                except BaseException:
                    await asyncio.shield(sandbox.discard())
                    raise
                if sent:
                    result = await sandbox.running.collect(
                        timeout=timeout if timeout is not None else self.limits.timeout_seconds,
                        max_chars=self.limits.max_output_chars,
                        stdin=stdin,
                        terminate=sandbox.terminate,
                        cleanup=sandbox.kill_all,
                        started=started,
                    )
                    return dataclasses.replace(result, enforcement=self.enforcement)
                if pool.closed:
                    raise SandboxUnavailable(_CLOSED)
                failures.append(await asyncio.shield(sandbox.failure()))
            finally:
                pool.release(sandbox)
        # fresh sandboxes could not be made, one after another: the session is unusable
        await self._recreate(epoch, holder)
        raise SandboxUnavailable(
            f"the command did not run: its sandbox could not be made ({failures[-1]}), so "
            f"the session was re-created from the source and the changes made in "
            f"{self.mount_point} are lost; run the command again"
        )

    async def aclose(self) -> None:
        """Refuse the commands not started yet, kill every command still running and
        every prepared sandbox (those being made are waited for), end the holder: the
        work copy goes with it. No command starts once this has returned."""
        self._epoch += 1
        async with self._open_lock:
            await self._end_session()
        await settle()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- the session: the holder and its pool ----------------------------------------------

    async def _session(self, epoch: int) -> tuple[Holder, SandboxPool]:
        async with self._open_lock:
            if epoch != self._epoch:
                raise SandboxUnavailable(_CLOSED)
            if self._holder is None or self._pool is None:
                source = self.work.source
                if source is not None and not source.is_dir():
                    raise ConfigError(f"the sandbox source {source} is not a folder")
                if not self.available():
                    raise SandboxUnavailable(_UNAVAILABLE)
                cgroups = self._cgroup_support()
                grouped = None
                if cgroups.parent is not None:  # the session is charged to one cgroup
                    grouped = _cgroup.SessionCgroup(cgroups, self.limits, max(self.pool_size, 1))
                    cgroups = grouped.commands
                try:
                    holder = await Holder.start(self, grouped)
                except BaseException:
                    if grouped is not None:
                        await grouped.remove()
                    raise
                self._holder, self.work.holder_pid = holder, holder.pid
                self._session_cgroup = grouped
                self._pool = SandboxPool(
                    lambda: CommandSandbox.start(self, holder, cgroups), self.pool_size
                )
                self._pool.fill()
            return self._holder, self._pool

    async def _recreate(self, epoch: int, holder: Holder) -> None:
        """End the session of ``holder`` (if it is still the current one) and start a new
        one from the source."""
        async with self._open_lock:
            if self._holder is holder:
                await self._end_session()
        await self._session(epoch)

    async def _end_session(self) -> None:
        holder, pool, grouped = self._holder, self._pool, self._session_cgroup
        self._holder, self._pool, self.work.holder_pid = None, None, None
        self._session_cgroup = None
        if pool is not None:
            await pool.close()
        if holder is not None:
            await holder.stop()
        if grouped is not None:
            await settle()  # the commands' cgroups first
            await grouped.remove()

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


_STARTS_BEFORE_RECREATE = 2
"""Sandboxes that fail to start in a row before the session is deemed unusable."""
_CLOSED = "the sandbox was closed before the command started: it did not run"
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
