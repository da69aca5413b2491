"""One cgroup (v2) per command: a kill that misses nothing, and total memory, process and
CPU caps where the host delegates those controllers.

What a host offers varies, so :func:`detect` finds out once and says it in a sentence:

- a cgroup v2 folder tether can write (its own cgroup, or ``parent`` given explicitly):
  each command gets a child cgroup, and ``cgroup.kill`` ends all of it;
- the ``memory``, ``pids`` and ``cpu`` controllers bind only if they are enabled in that
  folder's ``cgroup.subtree_control`` (a delegated subtree). tether never moves itself to
  enable them; for an explicit ``parent`` it tries ``+memory +pids +cpu`` once;
- where no controller binds there but ``systemd-run --scope`` works (``_systemd``), each
  command runs in its own transient scope with ``MemoryMax``, ``TasksMax``, ``CPUQuota``;
- otherwise (no cgroup v2, read-only ``/sys/fs/cgroup``): no cgroup, and the caller falls
  back to killing the command's PID namespace.

cgroup v1 hierarchies are not used.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import signal
from dataclasses import dataclass
from pathlib import Path

from tether.guards.sandbox import _systemd
from tether.guards.sandbox._systemd import SystemdScopes
from tether.guards.sandbox.base import SandboxLimits

CONTROLLERS = ("memory", "pids", "cpu")
_CPU_PERIOD_US = 100_000
_names = itertools.count()


@dataclass(frozen=True, slots=True)
class CgroupSupport:
    """What per-command cgroups can do on this host."""

    parent: Path | None
    """The folder per-command cgroups are made in; None when no cgroup is usable."""
    controllers: frozenset[str]
    """Which of ``memory``, ``pids``, ``cpu`` bind in those cgroups."""
    reason: str
    """Why not more, in one sentence ("" when everything binds)."""
    systemd: SystemdScopes | None = None
    """Start each command in its own systemd scope instead (then ``parent`` is None)."""

    @property
    def usable(self) -> bool:
        """Whether commands get a cgroup of their own."""
        return self.parent is not None or self.systemd is not None


def detect(parent: Path | None = None) -> CgroupSupport:
    """Find where per-command cgroups can be made, and which controllers bind there;
    without an explicit ``parent``, fall back to systemd scopes when none binds."""
    found = _detect_folder(parent)
    if parent is None and not found.controllers and (scopes := _systemd.find()) is not None:
        return CgroupSupport(None, frozenset(CONTROLLERS), "", systemd=scopes)
    return found


def _detect_folder(parent: Path | None) -> CgroupSupport:
    explicit = parent is not None
    mount = _cgroup2_mount()
    if mount is None:
        return CgroupSupport(None, frozenset(), "this host has no cgroup v2 file system")
    if parent is None:
        own = _own_cgroup()
        if own is None:
            return CgroupSupport(None, frozenset(), "tether's cgroup v2 path is unknown")
        parent = mount / own.lstrip("/")
    elif not parent.resolve().is_relative_to(mount):
        return CgroupSupport(None, frozenset(), "the given cgroup is not under cgroup v2")
    if not _can_make_children(parent):
        where = "the given cgroup" if explicit else "tether's cgroup"
        return CgroupSupport(None, frozenset(), f"tether cannot create cgroups in {where}")
    enabled = _subtree_controllers(parent)
    if explicit:
        enabled = _enable(parent, enabled)
    controllers = frozenset(enabled) & frozenset(CONTROLLERS)
    missing = [c for c in CONTROLLERS if c not in controllers]
    where = "the given cgroup" if explicit else "tether's cgroup"
    reason = (
        f"the {', '.join(missing)} controller{'s are' if len(missing) > 1 else ' is'} not "
        f"enabled for the children of {where}"
        if missing
        else ""
    )
    return CgroupSupport(parent, controllers, reason)


def own_scope_of(pid: int) -> Path | None:
    """The systemd scope folder ``pid`` runs in (never tether's own cgroup or above)."""
    return _systemd.scope_of(pid, _cgroup2_mount(), _own_cgroup())


def kill_folder(path: Path) -> None:
    """SIGKILL every process of the cgroup folder ``path`` (``cgroup.kill``)."""
    with contextlib.suppress(OSError):
        (path / "cgroup.kill").write_text("1")


class CommandCgroup:
    """The cgroup of one command: made with its caps, joined by the command's first
    process before it starts anything, killed and removed when the command ends."""

    def __init__(self, support: CgroupSupport, limits: SandboxLimits) -> None:
        assert support.parent is not None
        name = f"tether-{os.getpid()}-{next(_names)}-{secrets.token_hex(3)}"
        self.path = support.parent / name
        self.path.mkdir(mode=0o755)
        caps = {
            "memory": [("memory.max", str(limits.memory_bytes)), ("memory.swap.max", "0")],
            "pids": [("pids.max", str(limits.max_processes))],
            "cpu": [("cpu.max", f"{round(limits.cpus * _CPU_PERIOD_US)} {_CPU_PERIOD_US}")],
        }
        for controller in support.controllers:
            for file, value in caps[controller]:
                with contextlib.suppress(FileNotFoundError):  # memory.swap.max: no swap
                    (self.path / file).write_text(value)

    def adopt(self, pid: int) -> None:
        """Move ``pid`` (not yet forked) into this cgroup."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def kill(self) -> None:
        """SIGKILL every process in the cgroup (``cgroup.kill``, else one by one)."""
        try:
            (self.path / "cgroup.kill").write_text("1")
            return
        except FileNotFoundError:
            pass  # kernel before 5.14
        except OSError:
            return  # already removed
        for _ in range(10):
            pids = self._pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    async def remove(self, wait_seconds: float = 2.0) -> None:
        """Kill what is left, wait until the cgroup is empty, delete it."""
        self.kill()
        deadline = asyncio.get_running_loop().time() + wait_seconds
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # still populated: the kill is being delivered
                if asyncio.get_running_loop().time() > deadline:
                    return
                await asyncio.sleep(0.005)

    def empty(self) -> bool:
        """Whether no process is left in the cgroup."""
        try:
            events = (self.path / "cgroup.events").read_text()
        except OSError:
            return True
        return "populated 0" in events

    def _pids(self) -> list[int]:
        try:
            return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []


class SessionCgroup:
    """The cgroup of one bubblewrap session: its holder (in ``holder/``) and every command's
    cgroup sit under it. Memory is charged to the cgroup of whoever allocates it, and a
    command's charges move up to its parent when its cgroup is removed, so what a session
    keeps (the work copy's pages, and the kernel memory of its files and folders) is
    charged here, capped at ``memory.max`` where the memory controller binds."""

    def __init__(self, support: CgroupSupport, limits: SandboxLimits, commands: int) -> None:
        assert support.parent is not None
        name = f"tether-session-{os.getpid()}-{next(_names)}-{secrets.token_hex(3)}"
        self.path = support.parent / name
        self.path.mkdir(mode=0o755)
        if "memory" in support.controllers:
            (self.path / "memory.max").write_text(str(session_memory_bytes(limits, commands)))
            with contextlib.suppress(FileNotFoundError):
                (self.path / "memory.swap.max").write_text("0")
        enabled = _enable(self.path, set(), support.controllers)
        self.commands = CgroupSupport(
            self.path, support.controllers & frozenset(enabled), support.reason
        )
        """Where the session's command cgroups are made."""
        self.holder = self.path / "holder"
        self.holder.mkdir(mode=0o755)

    def adopt_holder(self, pid: int) -> None:
        """Move the holder's first process (not yet forked) into ``holder/``."""
        (self.holder / "cgroup.procs").write_text(str(pid))

    async def remove(self, wait_seconds: float = 2.0) -> None:
        """Kill what is left in the session's cgroups, then delete them."""
        kill_folder(self.path)
        deadline = asyncio.get_running_loop().time() + wait_seconds
        for folder in (self.holder, self.path):
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # still populated, or children being removed
                    if asyncio.get_running_loop().time() > deadline:
                        return
                    await asyncio.sleep(0.005)


def session_memory_bytes(limits: SandboxLimits, commands: int) -> int:
    """A session's memory cap: the work copy, with the kernel memory its files may pin,
    and ``commands`` commands at once, each with its memory and its scratch space."""
    scratch = limits.tmp_bytes + limits.shm_bytes + (1 << 20)
    per_command = limits.memory_bytes + scratch
    return limits.work_bytes + limits.kernel_memory_bytes(commands) + commands * per_command


def _cgroup2_mount() -> Path | None:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        before, _, after = line.partition(" - ")
        if after.split(" ", 1)[0] == "cgroup2":
            return Path(before.split()[4])
    return None


def _own_cgroup() -> str | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            return line[3:]
    return None


def _can_make_children(parent: Path) -> bool:
    probe = parent / f"tether-probe-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        probe.mkdir()
    except OSError:
        return False
    try:
        return (probe / "cgroup.procs").exists()
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()


def _subtree_controllers(parent: Path) -> set[str]:
    try:
        return set((parent / "cgroup.subtree_control").read_text().split())
    except OSError:
        return set()


def _enable(
    parent: Path, enabled: set[str], wanted: frozenset[str] = frozenset(CONTROLLERS)
) -> set[str]:
    """Try to enable the wanted controllers for ``parent``'s children (explicit parents
    and session cgroups only: tether's own cgroup holds tether, which the kernel forbids)."""
    try:
        available = set((parent / "cgroup.controllers").read_text().split())
    except OSError:
        return enabled
    for controller in wanted:
        if controller in available and controller not in enabled:
            with contextlib.suppress(OSError):
                (parent / "cgroup.subtree_control").write_text(f"+{controller}")
    return _subtree_controllers(parent)
