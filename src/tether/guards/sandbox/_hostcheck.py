"""What this host offers the bubblewrap backend: whether a session can start at all (the
probe), and which caps bind there (the enforcement statement)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import time
from typing import TYPE_CHECKING

from tether.guards.sandbox import _cgroup
from tether.guards.sandbox._enter import enter_argv, tools_present
from tether.guards.sandbox._session import mount_work
from tether.guards.sandbox.base import Enforcement, SandboxLimits

if TYPE_CHECKING:
    from tether.guards.sandbox.bwrap import BubblewrapSandbox


def enforcement(limits: SandboxLimits, cgroups: _cgroup.CgroupSupport) -> Enforcement:
    bound = cgroups.controllers
    gib = 1 << 30
    caps = [
        f"wall time {limits.timeout_seconds:g} s",
        f"work copy {limits.work_bytes / gib:.2g} GiB and {limits.work_inodes:,} files",
        f"/tmp {limits.tmp_bytes >> 20} MiB",
        f"{limits.memory_bytes / gib:.2g} GiB of memory "
        + ("in total" if "memory" in bound else "per process"),
        f"{limits.max_processes} processes "
        + ("in total" if "pids" in bound else "per command (of its user namespace)"),
    ]
    if "cpu" in bound:
        caps.append(f"{limits.cpus:g} CPUs")
    missing = [
        what
        for what, controller in [
            ("total memory", "memory"),
            ("total processes", "pids"),
            ("CPU share", "cpu"),
        ]
        if controller not in bound
    ]
    note = "Caps: " + ", ".join(caps) + (" (a systemd scope)." if cgroups.systemd else ".")
    if missing:
        note += f" Not capped: {', '.join(missing)} ({cgroups.reason})."
    return Enforcement(
        total_memory="memory" in bound,
        total_processes="pids" in bound,
        cpu_share="cpu" in bound,
        work_disk=True,
        kill="cgroup" if cgroups.usable else "pid namespace",
        note=note,
    )


def probe(box: BubblewrapSandbox) -> bool:
    """Start a holder and a command sandbox inside it, as a run does: user namespaces
    may be disabled, or not nestable, on this host."""
    if not tools_present(box.bwrap):
        return False
    info_r, info_w = os.pipe()
    data = [os.pipe() for _ in range(2)]
    for (_, write), text in zip(data, (box.passwd, box.group), strict=True):
        os.write(write, text.encode())
        os.close(write)
    argv = box.holder_argv(info_fd=info_w, passwd_fd=data[0][0], group_fd=data[1][0])
    extra_groups: list[int] | None = [] if box.run_as is not None else None
    holder = None
    try:
        holder = subprocess.Popen(
            [*argv, "--", "/bin/bash", "-c", f"{mount_work(box)} && echo ready; read -r _"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            pass_fds=(info_w, data[0][0], data[1][0]),
            user=box.run_as, group=box.run_as, extra_groups=extra_groups,
        )  # fmt: skip
        os.close(info_w)
        info_w = -1
        pid = read_info_blocking(info_r)
        assert holder.stdout is not None
        # enter its namespaces only once it is set up (its root pivoted, its mounts made)
        if pid is None or not select.select([holder.stdout], [], [], 10)[0]:
            return False
        if holder.stdout.readline().strip() != b"ready":
            return False
        user_fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
        ns_fds = (user_fd, os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY))
        try:
            done = subprocess.run(
                [*enter_argv(ns_fds, box.limits), *box.sandbox_argv(seccomp_fd=None),
                 "--", "/usr/bin/true"],
                capture_output=True, timeout=10, check=False, pass_fds=ns_fds,
                user=box.run_as, group=box.run_as, extra_groups=extra_groups,
            )  # fmt: skip
        finally:
            for fd in ns_fds:
                os.close(fd)
        return done.returncode == 0
    except (OSError, ValueError, subprocess.SubprocessError):
        return False
    finally:
        for fd in (info_r, info_w, data[0][0], data[1][0]):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if holder is not None:
            holder.kill()
            holder.wait()


def read_info_blocking(fd: int, seconds: float = 10.0) -> int | None:
    """The ``child-pid`` from a bwrap ``--info-fd`` (written in pieces), or None."""
    buffer = b""
    deadline = time.monotonic() + seconds
    while select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        buffer += chunk
        with contextlib.suppress(ValueError):
            pid = json.loads(buffer).get("child-pid")
            return pid if isinstance(pid, int) else None
    return None
