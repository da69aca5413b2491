"""The one protocol every sandbox backend implements, and what they share.

A :class:`Sandbox` runs an argv (never a string for a shell to split) in a throwaway copy
of a work tree and returns an :class:`ExecResult`: the exit code, both output streams
capped and made safe to display, whether the wall timeout killed it, and which caps were
enforced. Backends differ only in how they isolate.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Self, runtime_checkable

from tether.errors import ConfigError
from tether.guards.sandbox._cleanup import remove_tree

DEFAULT_ENV: dict[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
}
"""The whole environment of a sandboxed command: nothing of the host's leaks in (API keys)."""


KERNEL_BYTES_PER_INODE = 2048
"""Kernel memory one file, folder or link of a memory file system can cost, extended
attributes included where a tool allows them (measured: about 1 KiB without, on Linux
6.18; tmpfs charges attributes to the same inode budget)."""
TIMEOUT_EXIT_CODE = -9
"""The exit code of every command the wall timeout killed (SIGKILL), whatever the backend."""


class SandboxUnavailable(ConfigError):
    """No backend can isolate a command here, or the chosen one cannot start."""


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Resource caps of one sandboxed command (defaults in one place)."""

    timeout_seconds: float = 300.0
    """Wall-clock limit; past it every process of the command is killed."""
    memory_bytes: int = 1 << 30
    """Address space of each process (RLIMIT_AS), and the command's total memory where a
    memory cgroup binds it (a delegated cgroup v2 controller, or a container engine)."""
    cpu_seconds: int = 300
    """CPU time of each process (RLIMIT_CPU)."""
    file_size_bytes: int = 256 << 20
    """Largest file a process may write (RLIMIT_FSIZE)."""
    max_processes: int = 256
    """Processes of the command (RLIMIT_NPROC, which the kernel counts per user namespace:
    bubblewrap gives each command its own), and the command's total where a pids cgroup
    binds it."""
    open_files: int = 1024
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    tmp_bytes: int = 256 << 20
    """Size of the in-memory /tmp."""
    shm_bytes: int = 64 << 20
    """Size of the in-memory /dev/shm (bubblewrap: /tmp, /dev/shm and /run share one
    memory file system of ``tmp_bytes + shm_bytes`` + 1 MiB)."""
    work_bytes: int = 1 << 30
    """Size of the work copy, tree included: bubblewrap keeps the copy in a memory file
    system of this size, so a command cannot fill the host's disk through it."""
    work_inodes: int = 100_000
    """Files, folders and links the work copy may hold, tree included (bubblewrap: the
    memory file system's ``nr_inodes``; each costs the kernel about 1 KiB that
    ``work_bytes`` does not count)."""
    scratch_inodes: int = 10_000
    """Files, folders and links /tmp, /dev/shm and /run may hold together (bubblewrap)."""
    cpus: float = 2.0
    """CPU time per second of wall time, in cores, where a cpu cgroup binds it."""
    max_output_chars: int = 4000
    """Characters kept of each output stream; the rest is counted in bytes and dropped."""

    def __post_init__(self) -> None:
        for name in self.__slots__:
            if getattr(self, name) <= 0:
                raise ConfigError(f"SandboxLimits.{name} must be positive")

    def kernel_memory_bytes(self, commands: int = 1) -> int:
        """The most kernel memory (slab: inodes, dentries, extended attributes) that the
        files of a bubblewrap session can pin while ``commands`` run at once, which no
        size cap counts: ``KERNEL_BYTES_PER_INODE`` for each inode its memory file
        systems allow."""
        inodes = self.work_inodes + self.scratch_inodes * commands
        return inodes * KERNEL_BYTES_PER_INODE

    def ulimits(self) -> str:
        """The bash ``ulimit`` command that sets the per-process caps, soft and hard."""
        return (
            f"ulimit -v {self.memory_bytes // 1024} -t {self.cpu_seconds}"
            f" -f {self.file_size_bytes // 1024} -u {self.max_processes}"
            f" -n {self.open_files} -c 0"
        )

    def ulimit_script(self) -> str:
        """A bash preamble that sets the per-process caps (soft and hard) then execs "$@"."""
        return f'{self.ulimits()} || exit 125; exec "$@"'


@dataclass(frozen=True, slots=True)
class Enforcement:
    """Which caps of :class:`SandboxLimits` bind a command here. Some depend on what the
    host delegates (cgroup v2 controllers), so a backend finds out at run time and says so
    instead of promising a cap it cannot keep."""

    total_memory: bool = False
    """``memory_bytes`` caps the command's processes together, not only each one."""
    total_processes: bool = False
    """``max_processes`` counts the command's processes, not the sandbox user's."""
    cpu_share: bool = False
    """``cpus`` caps the command's CPU time per second."""
    work_disk: bool = False
    """``work_bytes`` caps the work copy (the host's disk is out of reach)."""
    kill: str = "process group"
    """What ends everything a command started: ``cgroup``, ``pid namespace`` or
    ``process group`` (a process that calls ``setsid`` escapes the last)."""
    note: str = ""
    """One sentence for people and models: what binds, what does not, and why."""


@dataclass(frozen=True, slots=True)
class ExecResult:
    """What a sandboxed command did. Output streams are already capped."""

    exit_code: int
    """The exit status; negative when the process was killed by that signal, and always
    ``TIMEOUT_EXIT_CODE`` (-9, SIGKILL) when the wall timeout killed it."""
    stdout: str
    stderr: str
    timed_out: bool = False
    """True when the wall timeout killed the command."""
    stdout_omitted: int = 0
    """Bytes of stdout dropped by the cap, never decoded (the notice in ``stdout`` says it
    too)."""
    stderr_omitted: int = 0
    """Bytes of stderr dropped by the cap."""
    duration_seconds: float = 0.0
    enforcement: Enforcement | None = None
    """Which caps bound this command (None: the backend does not say)."""

    def to_text(self) -> str:
        """The tool result: ``exit code N``, then stdout, then stderr."""
        head = f"exit code {self.exit_code}"
        if self.timed_out:
            head += f" (killed: wall timeout after {self.duration_seconds:.0f} s)"
        return f"{head}\n{self.stdout}\n{self.stderr}"


@runtime_checkable
class Sandbox(Protocol):
    """Runs commands in isolation, inside a throwaway copy of a work tree."""

    name: str
    """The backend's name: ``bubblewrap``, ``docker``, ``podman``, ``host``."""
    isolated: bool
    """False only for host execution, which a shell tool refuses unless opted into."""
    limits: SandboxLimits

    def available(self) -> bool:
        """Whether this backend can run here (binary present, engine answering)."""
        ...

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the kill is part of the result)
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run ``argv`` (a list; ``argv[0]`` is looked up on the sandbox's PATH) in the work
        copy; ``timeout`` overrides the wall limit; ``stdin`` is what the command reads
        (default: nothing, end of file). When the command ends, is cancelled or times out,
        every process it started is killed."""
        ...

    async def aclose(self) -> None:
        """Delete the work copy and anything still running."""
        ...


def check_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` as a list of strings; a bare string is refused (it would be split)."""
    if isinstance(argv, str | bytes) or not argv:
        raise TypeError("argv must be a non-empty list of strings, e.g. ['bash', '-c', command]")
    out = list(argv)
    for arg in out:
        if not isinstance(arg, str) or "\0" in arg:
            raise TypeError("every argv item must be a string without NUL bytes")
        try:
            arg.encode()
        except UnicodeEncodeError:
            raise TypeError(
                f"argv items must be valid text: {lone_surrogate(arg)} cannot be encoded"
            ) from None
    return out


def lone_surrogate(text: str) -> str:
    """Where the first lone surrogate of ``text`` is, in words ("" when there is none)."""
    for index, char in enumerate(text):
        if 0xD800 <= ord(char) <= 0xDFFF:
            return f"a lone surrogate (U+{ord(char):04X}) at character {index}"
    return ""


# --- the throwaway work copy --------------------------------------------------------------


class WorkCopy:
    """A private temporary copy of a source tree, owned by the sandbox's user.

    Symlinks are copied as links (never followed: a link to a host file must not become a
    copy of its content), special files are skipped, hard links become separate files.
    """

    def __init__(
        self,
        source: Path | None,
        *,
        owner: tuple[int, int] | None = None,
        ignore: Sequence[str] = (),
    ) -> None:
        self.source = source
        self.owner = owner
        self.ignore = tuple(ignore)
        self.root: Path | None = None

    @property
    def path(self) -> Path:
        """The work copy (the folder mounted in the sandbox)."""
        if self.root is None:
            raise RuntimeError("the work copy is not created yet")
        return self.root / "work"

    def create(self) -> Path:
        """Make the copy (blocking I/O: call it in a thread)."""
        if self.root is not None:
            return self.path
        if self.source is not None and not self.source.is_dir():
            raise ConfigError(f"the sandbox source {self.source} is not a folder")
        root = Path(tempfile.mkdtemp(prefix="tether-sandbox-"))
        self.root = root
        work = root / "work"
        if self.source is None:
            work.mkdir()
        else:
            ignore = shutil.ignore_patterns(*self.ignore) if self.ignore else None
            shutil.copytree(
                self.source, work, symlinks=True, ignore=_skip_special(ignore), dirs_exist_ok=False
            )
        if self.owner is not None:
            uid, gid = self.owner
            os.chown(root, uid, gid)
            for path in [work, *work.rglob("*")]:
                os.lchown(path, uid, gid)
        return work

    def remove(self) -> None:
        """Delete the copy and everything the sandbox wrote in it, never following a link
        out of it, whatever its depth or permissions (see ``_cleanup``)."""
        root, self.root = self.root, None
        if root is not None:
            remove_tree(root)


def _skip_special(
    ignore: Callable[[str, list[str]], set[str]] | None,
) -> Callable[[str, list[str]], set[str]]:
    def skip(folder: str, names: list[str]) -> set[str]:
        dropped = set(ignore(folder, names)) if ignore else set()
        for name in names:
            mode = os.lstat(os.path.join(folder, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                dropped.add(name)
        return dropped

    return skip


class WorkCopyLifecycle:
    """The work copy's life for a backend: made on first use (or ``await open()``),
    removed by ``aclose()``; ``async with`` does both."""

    work: WorkCopy

    async def open(self) -> Path:
        """Create the work copy now (else the first run does); return its host path."""
        if self.work.root is None:
            await asyncio.to_thread(self.work.create)
        return self.work.path

    async def aclose(self) -> None:
        """Delete the work copy."""
        await asyncio.to_thread(self.work.remove)

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
