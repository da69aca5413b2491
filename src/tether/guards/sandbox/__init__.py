"""Sandboxed command execution behind one protocol, and the shell tool built on it.

``select_sandbox(source)`` picks bubblewrap, else Docker or Podman; with none it refuses,
unless ``allow_host=True`` accepts unconfined host execution. ``shell_tool(sandbox)`` turns
a sandbox into a tether tool. Every result says which caps bound it (``Enforcement``).
"""

from tether.guards.sandbox.base import (
    Enforcement,
    ExecResult,
    Sandbox,
    SandboxLimits,
    SandboxUnavailable,
    WorkCopy,
)
from tether.guards.sandbox.bwrap import BubblewrapSandbox
from tether.guards.sandbox.container import ContainerSandbox
from tether.guards.sandbox.host import HostExecution
from tether.guards.sandbox.tool import ShellTool, select_sandbox, shell_tool

__all__ = [
    "BubblewrapSandbox",
    "ContainerSandbox",
    "Enforcement",
    "ExecResult",
    "HostExecution",
    "Sandbox",
    "SandboxLimits",
    "SandboxUnavailable",
    "ShellTool",
    "WorkCopy",
    "select_sandbox",
    "shell_tool",
]
