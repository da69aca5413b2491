"""Host execution: no isolation at all, for callers who opt in knowingly.

The command runs as tether's own user, with its network, its disk and its privileges. Only
the conveniences stay: a work copy as the current folder, a clean environment, the wall
timeout, the per-process rlimits (which do not bind root's process count), the process
group killed at the end, capped output made safe to display. A process that leaves the
group (``setsid``) survives. A shell tool refuses this backend unless it is given
``allow_host=True``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from tether.guards.sandbox._exec import execute
from tether.guards.sandbox.base import (
    DEFAULT_ENV,
    Enforcement,
    ExecResult,
    SandboxLimits,
    WorkCopy,
    WorkCopyLifecycle,
    check_argv,
)


class HostExecution(WorkCopyLifecycle):
    """Runs commands directly on the host, in a throwaway copy of ``source``."""

    name = "host"
    isolated = False

    def __init__(
        self,
        source: Path | str | None = None,
        *,
        limits: SandboxLimits | None = None,
        ignore: Sequence[str] = (),
    ) -> None:
        self.limits = limits or SandboxLimits()
        self.work = WorkCopy(Path(source) if source is not None else None, ignore=ignore)

    def available(self) -> bool:
        return True

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the kill is part of the result)
        stdin: bytes | None = None,
    ) -> ExecResult:
        command = check_argv(argv)
        work = await self.open()
        script = self.limits.ulimit_script()
        result = await execute(
            ["/bin/bash", "-c", script, "tether-host", *command],
            timeout=timeout if timeout is not None else self.limits.timeout_seconds,
            max_chars=self.limits.max_output_chars,
            env={**DEFAULT_ENV, "HOME": str(work)},
            cwd=work,
            stdin=stdin,
        )
        return dataclasses.replace(result, enforcement=ENFORCEMENT)


ENFORCEMENT = Enforcement(
    kill="process group",
    note=(
        "No isolation: the command runs as tether's user on the host. Caps: wall time and "
        "per-process rlimits; a process that calls setsid outlives the command."
    ),
)
