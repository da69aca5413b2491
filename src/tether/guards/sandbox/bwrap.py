"""The bubblewrap backend: Linux namespaces, no daemon, a few milliseconds per command.

Each command runs as an unprivileged user in fresh user, PID, network, IPC, UTS and
cgroup namespaces, on a read-only minimal root (``/usr`` and a few files of ``/etc``),
with in-memory ``/tmp`` and ``/run``, the work copy as the only writable host folder,
no capabilities, a seccomp filter and per-process rlimits. See docs/sandbox.md for why
each flag is there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tether.guards.sandbox import seccomp
from tether.guards.sandbox._exec import execute
from tether.guards.sandbox.base import (
    DEFAULT_ENV,
    ExecResult,
    SandboxLimits,
    SandboxUnavailable,
    WorkCopy,
    WorkCopyLifecycle,
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


class BubblewrapSandbox(WorkCopyLifecycle):
    """Runs commands with bubblewrap (``bwrap``) in a throwaway copy of ``source``.

    ``source=None`` gives an empty work folder. The copy is made on first use (or
    ``await sandbox.open()``) and deleted by ``aclose()``; use ``async with``.
    ``mount_point`` is where the copy appears inside; ``ro_binds`` maps extra host
    folders read-only (host path -> sandbox path). When tether runs as root, bwrap is
    started as ``uid`` (default nobody) so that the process limit applies and the
    sandbox owns no host file but its copy.
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
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.mount_point = mount_point
        self.ro_binds = tuple(ro_binds)
        self.bwrap = bwrap
        self.run_as = uid if os.geteuid() == 0 else None
        owner = (uid, uid) if self.run_as is not None else None
        self.work = WorkCopy(
            Path(source) if source is not None else None, owner=owner, ignore=ignore
        )
        self._filter = seccomp.build_filter() if seccomp.supported() else None
        self._open_lock = asyncio.Lock()
        self._available: bool | None = None

    def available(self) -> bool:
        """Whether bwrap is installed and can create its namespaces here (tried once)."""
        if self._available is None:
            self._available = self._filter is not None and _probe(self.bwrap, self.run_as)
        return self._available

    async def open(self) -> Path:
        """Create the work copy now (else the first run does); return its host path."""
        async with self._open_lock:
            if self.work.root is None:
                await asyncio.to_thread(self.work.create)
                assert self.work.root is not None
                (self.work.root / "passwd").write_text(_PASSWD)
                (self.work.root / "group").write_text(_GROUP)
        return self.work.path

    def argv(
        self, command: Sequence[str], *, seccomp_fd: int | None, info_fd: int | None = None
    ) -> list[str]:
        """The full bwrap command line for ``command`` (pure; tested as such)."""
        if self.work.root is None:
            raise RuntimeError("open() the sandbox before building its command line")
        limits = self.limits
        args = [self.bwrap]
        # namespaces and identity
        args += ["--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc"]
        args += ["--unshare-uts", "--unshare-cgroup-try", "--disable-userns"]
        args += ["--uid", str(NOBODY), "--gid", str(NOBODY), "--hostname", "sandbox"]
        args += ["--cap-drop", "ALL", "--new-session", "--die-with-parent"]
        if seccomp_fd is not None:
            args += ["--seccomp", str(seccomp_fd)]
        if info_fd is not None:
            args += ["--info-fd", str(info_fd)]
        # read-only minimal root
        args += _root_args()
        for name in ETC_FILES:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        args += ["--ro-bind", str(self.work.root / "passwd"), "/etc/passwd"]
        args += ["--ro-bind", str(self.work.root / "group"), "/etc/group"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
        args += ["--size", str(1 << 20), "--tmpfs", "/run"]
        for host_path, sandbox_path in self.ro_binds:
            args += ["--ro-bind", host_path, sandbox_path]
        # the only writable host folder
        args += ["--bind", str(self.work.path), self.mount_point, "--chdir", self.mount_point]
        args += ["--", "/bin/bash", "-c", limits.ulimit_script(), "tether-sandbox", *command]
        return args

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the kill is part of the result)
    ) -> ExecResult:
        command = check_argv(argv)
        if not self.available():
            raise SandboxUnavailable(
                "bubblewrap is not installed (or this CPU has no seccomp filter): "
                "install the 'bubblewrap' package or choose another sandbox"
            )
        await self.open()
        seccomp_r, seccomp_w = os.pipe()
        info_r, info_w = os.pipe()
        os.set_blocking(info_r, False)
        try:
            assert self._filter is not None
            os.write(seccomp_w, self._filter)  # a few hundred bytes: fits the pipe buffer
            os.close(seccomp_w)
            seccomp_w = -1
            argv = self.argv(command, seccomp_fd=seccomp_r, info_fd=info_w)
            result = await execute(
                argv,
                timeout=timeout if timeout is not None else self.limits.timeout_seconds,
                max_chars=self.limits.max_output_chars,
                env=DEFAULT_ENV,
                pass_fds=(seccomp_r, info_w),
                user=self.run_as,
                group=self.run_as,
                kill_first=lambda: _kill_namespace(info_r),
            )
        finally:
            for fd in (seccomp_r, seccomp_w, info_r, info_w):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
        if result.exit_code == 1 and result.stderr.startswith("bwrap:"):
            raise SandboxUnavailable(
                f"bubblewrap could not create the sandbox: {result.stderr.strip()}"
            )
        return result


def _kill_namespace(info_fd: int) -> None:
    """SIGKILL the sandbox's PID 1: the kernel then kills every process of the namespace,
    and that PID 1 exits only once they are all gone, before bwrap itself exits."""
    try:
        info = json.loads(os.read(info_fd, 65536) or b"{}")
    except (OSError, ValueError):
        return  # not started yet: killing bwrap's group is enough (--die-with-parent)
    pid = info.get("child-pid")
    if isinstance(pid, int) and pid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


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


def _probe(bwrap: str, run_as: int | None) -> bool:
    """Start an empty sandbox with the same namespaces: user namespaces may be disabled."""
    if shutil.which(bwrap) is None:
        return False
    argv = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-net", "--disable-userns"]
    argv += [*_root_args(), "--chdir", "/", "--", "/usr/bin/true"]
    try:
        done = subprocess.run(
            argv, capture_output=True, timeout=10, check=False, user=run_as, group=run_as,
            extra_groups=[] if run_as is not None else None,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0
