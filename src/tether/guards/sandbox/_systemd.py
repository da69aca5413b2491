"""Per-command caps through systemd: a transient scope per command (``systemd-run
--scope``), for hosts where tether's own cgroup is not delegated but a systemd manager is
(a desktop session: the user manager delegates memory, pids and cpu to its scopes).

:func:`find` trusts nothing it has not seen: it starts a capped scope that must run a
command which still holds a descriptor tether passed it (the command sandbox needs them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tether.guards.sandbox.base import SandboxLimits


@dataclass(frozen=True, slots=True)
class SystemdScopes:
    """How to start a command in its own capped systemd scope."""

    executable: str
    """The absolute path of ``systemd-run``."""
    user: bool
    """Whether to ask the user's manager (``--user``): tether is not root."""


def find() -> SystemdScopes | None:
    """``systemd-run``, if it can start a capped scope here that keeps tether's descriptors."""
    executable = shutil.which("systemd-run")
    if executable is None:
        return None
    scopes = SystemdScopes(executable, user=os.geteuid() != 0)
    read, write = os.pipe()
    try:
        probe = scope_argv(scopes, SandboxLimits(memory_bytes=64 << 20, max_processes=16))
        done = subprocess.run(
            [*probe, "/bin/sh", "-c", f"test -e /proc/self/fd/{read}"],
            pass_fds=(read,), capture_output=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        os.close(read)
        os.close(write)
    return scopes if done.returncode == 0 else None


def scope_argv(scopes: SystemdScopes, limits: SandboxLimits) -> list[str]:
    """The ``systemd-run`` prefix that runs a command in a new scope with the caps."""
    return [
        scopes.executable, *(["--user"] if scopes.user else []),
        "--scope", "--quiet", "--collect",
        "-p", f"MemoryMax={limits.memory_bytes}", "-p", "MemorySwapMax=0",
        "-p", f"TasksMax={limits.max_processes}", "-p", f"CPUQuota={round(limits.cpus * 100)}%",
        "--",
    ]  # fmt: skip


def scope_of(pid: int, mount: Path | None, own: str | None) -> Path | None:
    """The cgroup folder of the scope ``pid`` runs in; None unless it is a scope that is
    neither tether's own cgroup nor above it (never kill tether itself)."""
    if mount is None or own is None:
        return None
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            if not line.startswith("0::"):
                continue
            path = line[3:]
            return mount / path.lstrip("/") if killable(path, own) else None
    return None


def killable(path: str, own: str) -> bool:
    """Whether the cgroup ``path`` may be killed: a scope, not tether's own cgroup
    (``own``) nor one above it."""
    return path.endswith(".scope") and path != own and not own.startswith(path.rstrip("/") + "/")
