"""The Docker / Podman backend: the seed's throwaway container, for hosts with an engine.

``docker run --rm --network none --read-only --tmpfs /tmp --cap-drop ALL
--security-opt no-new-privileges --user 65534 --memory --cpus --pids-limit``, the work
copy mounted as the only writable folder, ``timeout`` inside, the command as one argument
of ``bash -c``. Killing the engine's client does not stop the container, so a timeout or
a cancellation also removes the container by its name.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from tether.guards.sandbox._exec import execute
from tether.guards.sandbox.base import (
    DEFAULT_ENV,
    TIMEOUT_EXIT_CODE,
    Enforcement,
    ExecResult,
    SandboxLimits,
    SandboxUnavailable,
    WorkCopy,
    WorkCopyLifecycle,
    check_argv,
)

Engine = Literal["docker", "podman"]
DEFAULT_IMAGE = "debian:bookworm-slim"
_KILLED_BY_TIMEOUT = 137
"""What ``timeout -s KILL`` exits with when it killed the command."""


class ContainerSandbox(WorkCopyLifecycle):
    """Runs each command in a fresh container of ``image`` over a copy of ``source``.

    The image must provide ``bash`` and ``timeout`` and be present locally (the sandbox
    has no network, so nothing is pulled mid-run: ``--pull never``).
    """

    isolated = True

    def __init__(
        self,
        source: Path | str | None = None,
        *,
        engine: Engine = "docker",
        image: str = DEFAULT_IMAGE,
        limits: SandboxLimits | None = None,
        cpus: float = 2.0,
        mount_point: str = "/work",
        user: str = "65534:65534",
        ignore: Sequence[str] = (),
        executable: str | None = None,
    ) -> None:
        self.name: str = engine
        self.engine = executable or engine
        self.image = image
        self.limits = limits or SandboxLimits()
        self.cpus = cpus
        self.mount_point = mount_point
        self.user = user
        uid, _, gid = user.partition(":")
        owner = (int(uid), int(gid or uid)) if os.geteuid() == 0 and uid.isdigit() else None
        self.work = WorkCopy(
            Path(source) if source is not None else None, owner=owner, ignore=ignore
        )
        self._available: bool | None = None

    def available(self) -> bool:
        """Whether the engine's client is installed *and* its daemon or service answers
        (``<engine> info``); the answer is remembered."""
        if self._available is None:
            self._available = _engine_answers(self.engine)
        return self._available

    def argv(
        self, command: Sequence[str], *, name: str, timeout: float, stdin: bool = False
    ) -> list[str]:
        """The engine command line for ``command`` in a container called ``name`` (pure);
        ``stdin`` keeps the container's stdin open (``-i``) for data to read."""
        limits = self.limits
        return [
            self.engine, "run", "--rm", "--name", name, "--pull", "never",
            *(["-i"] if stdin else []),
            "--network", "none",  # nothing to exfiltrate, nothing to download
            "--read-only",  # only /tmp, /run and the work copy are writable
            "--tmpfs", f"/tmp:rw,nosuid,nodev,size={limits.tmp_bytes}",
            "--tmpfs", "/run:rw,nosuid,nodev,size=1m",
            "-e", "HOME=/tmp", "-e", "LANG=C.UTF-8",
            "--cap-drop", "ALL",  # no Linux capability
            "--security-opt", "no-new-privileges",  # no setuid, no privilege gain
            "--user", self.user,  # not root
            "--memory", str(limits.memory_bytes), "--memory-swap", str(limits.memory_bytes),
            "--cpus", f"{self.cpus:g}", "--pids-limit", str(limits.max_processes),
            "--ulimit", f"cpu={limits.cpu_seconds}",
            "--ulimit", f"fsize={limits.file_size_bytes}",
            "--ulimit", f"nofile={limits.open_files}",
            "--ulimit", "core=0",
            "-v", f"{self.work.path}:{self.mount_point}:rw",  # a throwaway copy, never the tree
            "-w", self.mount_point,
            self.image,
            "timeout", "-s", "KILL", f"{max(1, round(timeout))}", *command,
        ]  # fmt: skip

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the kill is part of the result)
        stdin: bytes | None = None,
    ) -> ExecResult:
        command = check_argv(argv)
        if not self.available():
            raise SandboxUnavailable(
                f"the container engine {self.engine!r} is not installed or not running: "
                "start it or choose another sandbox"
            )
        await self.open()
        wall = timeout if timeout is not None else self.limits.timeout_seconds
        name = f"tether-{uuid.uuid4().hex[:16]}"

        async def remove() -> None:
            await _remove_container(self.engine, name)

        result = await execute(
            self.argv(command, name=name, timeout=wall, stdin=stdin is not None),
            timeout=wall + 10,  # the in-container timeout fires first; this is the backstop
            max_chars=self.limits.max_output_chars,
            env={**DEFAULT_ENV, **_engine_env()},
            stdin=stdin,
            on_kill=remove,
        )
        inner = max(1, round(wall))
        if result.exit_code == _KILLED_BY_TIMEOUT and result.duration_seconds >= inner:
            # the in-container timeout killed it: reported as tether's own timeout is
            result = dataclasses.replace(result, exit_code=TIMEOUT_EXIT_CODE, timed_out=True)
        return dataclasses.replace(result, enforcement=self.enforcement)

    @property
    def enforcement(self) -> Enforcement:
        """The engine's cgroup caps the container's memory, processes and CPU; the work
        copy is a host folder, so its size is not capped."""
        return Enforcement(
            total_memory=True,
            total_processes=True,
            cpu_share=True,
            work_disk=False,
            kill="cgroup",
            note=(
                f"Caps: wall time {self.limits.timeout_seconds:g} s, memory, processes and "
                f"{self.cpus:g} CPUs in total (the engine's cgroup). Not capped: the work "
                "copy's size (a host folder)."
            ),
        )


def _engine_env() -> dict[str, str]:
    """What the engine's client needs from the host environment to find its daemon."""
    keep = ("DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "CONTAINER_HOST", "XDG_RUNTIME_DIR")
    return {k: v for k in keep if (v := os.environ.get(k)) is not None}


def _engine_answers(engine: str) -> bool:
    if shutil.which(engine) is None:
        return False
    try:
        done = subprocess.run(
            [engine, "info", "--format", "{{.ID}}"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


async def _remove_container(engine: str, name: str) -> None:
    with contextlib.suppress(OSError):
        proc = await asyncio.create_subprocess_exec(
            engine, "rm", "-f", name,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 30)
