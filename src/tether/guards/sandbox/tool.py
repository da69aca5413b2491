"""The shell tool, and the choice of a sandbox that can isolate it here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tether.errors import InvalidArguments, ToolFailure
from tether.guards.sandbox.base import (
    Enforcement,
    Sandbox,
    SandboxLimits,
    SandboxUnavailable,
    lone_surrogate,
)
from tether.guards.sandbox.bwrap import BubblewrapSandbox
from tether.guards.sandbox.container import ContainerSandbox
from tether.guards.sandbox.host import HostExecution
from tether.tools import RunContext, Tool, ToolSpec

MAX_COMMAND_BYTES = 1_000_000
"""The longest command the shell tool accepts (UTF-8 bytes)."""
ARGV_COMMAND_BYTES = 100_000
"""Longer commands travel on stdin: Linux caps one exec argument at 128 KiB."""
_FROM_STDIN = 'c=$(cat; echo .); c=${c%.}; exec </dev/null; eval "$c"'
"""Read the whole command from stdin, give the command no stdin (like a short one), run it."""

NO_ISOLATION = (
    "no sandbox can isolate commands on this machine: install bubblewrap (Debian package "
    "'bubblewrap') or start Docker or Podman, or pass allow_host=True to run commands "
    "unconfined on the host"
)


def select_sandbox(
    source: Path | str | None = None,
    *,
    limits: SandboxLimits | None = None,
    ignore: Sequence[str] = (),
    allow_host: bool = False,
) -> Sandbox:
    """The first backend that can isolate here: bubblewrap, then Docker, then Podman.

    With none, raise :class:`SandboxUnavailable`, unless ``allow_host=True`` explicitly
    accepts :class:`HostExecution` (no isolation at all).
    """
    candidates: list[Sandbox] = [
        BubblewrapSandbox(source, limits=limits, ignore=ignore),
        ContainerSandbox(source, engine="docker", limits=limits, ignore=ignore),
        ContainerSandbox(source, engine="podman", limits=limits, ignore=ignore),
    ]
    for sandbox in candidates:
        if sandbox.available():
            return sandbox
    if allow_host:
        return HostExecution(source, limits=limits, ignore=ignore)
    raise SandboxUnavailable(NO_ISOLATION)


class ShellTool(Tool):
    """Runs the model's ``command`` as one argument of ``bash -c --`` in a sandbox (a
    command over 100 kB is passed on stdin instead; over 1 MB it is refused)."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        allow_host: bool = False,
        name: str = "shell",
        description: str | None = None,
        mount_point: str = "/work",
    ) -> None:
        if not sandbox.isolated and not allow_host:
            raise SandboxUnavailable(
                f"the {sandbox.name!r} backend does not isolate commands: the shell tool "
                "refuses it unless created with allow_host=True"
            )
        self.sandbox = sandbox
        limits = sandbox.limits
        where = (
            f"in a throwaway sandbox with no network, where only a copy of the work tree is "
            f"mounted, at {mount_point}, the current folder"
            if sandbox.isolated
            else "directly on the host, unconfined, in a copy of the work tree"
        )
        enforcement = getattr(sandbox, "enforcement", None)
        caps = f" {enforcement.note}" if isinstance(enforcement, Enforcement) else ""
        text = description or (
            f"Runs a bash command {where}. "
            "Use it to read, search, build and test the code; a command that downloads "
            "anything fails, and nothing outside the work copy persists. "
            f"The command is killed after {limits.timeout_seconds:g} seconds, and each of "
            f"stdout and stderr is cut at {limits.max_output_chars} characters, so filter "
            "at the source (grep, head, wc). "
            "It returns 'exit code N', then stdout, then stderr; control characters in "
            "the output are shown as escapes (\\x1b), invalid UTF-8 as \\xNN."
            f"{caps}"
        )
        self.spec = ToolSpec(
            name,
            text,
            {
                "type": "object",
                "properties": {
                    "command": {
                        "type": "string",
                        "minLength": 1,
                        "description": "The bash command, run as `bash -c -- COMMAND` in "
                        "the work copy, for example: grep -rn TODO src",
                    }
                },
                "required": ["command"],
                "additionalProperties": False,
            },
        )

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        command = arguments.get("command")
        extra = sorted(set(arguments) - {"command"})
        problems = [f"{k}: unexpected argument" for k in extra]
        if not isinstance(command, str) or not command.strip():
            problems.insert(0, "command: a non-empty string is required")
        elif "\0" in command:
            problems.insert(0, "command: NUL bytes are not allowed")
        elif (encoded := _utf8(command)) is None:
            problems.insert(
                0,
                f"command: holds {lone_surrogate(command)}, which is not valid text; write "
                "that character as an escape instead (for example printf '\\xff')",
            )
        elif len(encoded) > MAX_COMMAND_BYTES:
            problems.insert(
                0,
                f"command: {len(encoded):,} bytes, over the {MAX_COMMAND_BYTES:,}-byte limit; "
                "write a long script to a file in several commands, then run the file",
            )
        if problems:
            raise InvalidArguments(self.spec.name, problems)
        assert isinstance(command, str) and encoded is not None
        try:
            if len(encoded) <= ARGV_COMMAND_BYTES:
                result = await self.sandbox.run(["bash", "-c", "--", command])
            else:
                result = await self.sandbox.run(["bash", "-c", _FROM_STDIN], stdin=encoded)
        except SandboxUnavailable as exc:
            raise ToolFailure(f"the shell is unavailable: {exc}") from None
        except OSError as exc:
            raise ToolFailure(
                f"the command could not be started ({exc.strerror or exc}); "
                "try a shorter or simpler command"
            ) from None
        return result.to_text()


def _utf8(text: str) -> bytes | None:
    """``text`` in UTF-8; None when it holds a lone surrogate (no byte sequence is it)."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return None


def shell_tool(
    sandbox: Sandbox,
    *,
    allow_host: bool = False,
    name: str = "shell",
    description: str | None = None,
) -> ShellTool:
    """A tool that runs the model's bash command in ``sandbox``.

    A sandbox that does not isolate (:class:`HostExecution`) is refused with
    :class:`SandboxUnavailable` unless ``allow_host=True`` says the caller accepts it.
    """
    return ShellTool(sandbox, allow_host=allow_host, name=name, description=description)
