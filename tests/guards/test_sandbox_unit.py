"""Sandbox pieces tested on their own: the BPF program, output caps, command lines, the
container backend against a fake engine, backend choice and the shell tool."""

from __future__ import annotations

import asyncio
import itertools
import os
import struct
from pathlib import Path

import pytest

from tether.errors import InvalidArguments, ToolFailure
from tether.guards.sandbox import (
    BubblewrapSandbox,
    ContainerSandbox,
    ExecResult,
    HostExecution,
    SandboxLimits,
    SandboxUnavailable,
    select_sandbox,
    shell_tool,
)
from tether.guards.sandbox import bwrap as bwrap_module
from tether.guards.sandbox import container as container_module
from tether.guards.sandbox._exec import CappedText
from tether.guards.sandbox.seccomp import RET_ALLOW, RET_KILL_PROCESS, build_filter
from tether.loop import Agent
from tether.providers.scripted import ScriptedClient, call_reply, text_reply
from tether.tools import RunContext, lint

CTX: RunContext[None] = RunContext(deps=None)


# --- seccomp -------------------------------------------------------------------------------


def _decode(program: bytes) -> list[tuple[int, int, int, int]]:
    return [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_filter_is_well_formed(machine: str) -> None:
    prog = _decode(build_filter(machine))
    assert prog[0] == (0x20, 0, 0, 4)  # load arch first
    for i, (code, jt, jf, _k) in enumerate(prog):
        if code & 0x07 == 0x05:  # jumps stay inside the program
            assert i + 1 + max(jt, jf) < len(prog)
    returns = {k for code, _jt, _jf, k in prog if code == 0x06}
    assert returns == {RET_ALLOW, RET_KILL_PROCESS, 0x00050000 | 1}
    assert any(code == 0x20 and k == 16 for code, _a, _b, k in prog)  # reads the domain


def _emulate(program: bytes, nr: int, arch: int, arg0: int) -> int:
    """A tiny classic-BPF interpreter for the opcodes the filter uses."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    prog, pc, acc = _decode(program), 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35):
            hit = acc == k if code == 0x15 else acc >= k
            pc += 1 + (jt if hit else jf)
        else:
            return k


@pytest.mark.parametrize(
    ("nr", "arch", "arg0", "expected"),
    [
        (41, 0xC000003E, 1, 0x00050001),  # socket(AF_UNIX) -> EPERM
        (53, 0xC000003E, 1, 0x00050001),  # socketpair(AF_UNIX) -> EPERM
        (41, 0xC000003E, (1 << 32) | 1, 0x00050001),  # high bits cannot hide AF_UNIX
        (41, 0xC000003E, 2, RET_ALLOW),  # socket(AF_INET)
        (0, 0xC000003E, 1, RET_ALLOW),  # read
        (250, 0xC000003E, 0, 0x00050001),  # keyctl
        (0x40000000 + 41, 0xC000003E, 1, RET_KILL_PROCESS),  # x32 ABI
        (359, 0x40000003, 1, RET_KILL_PROCESS),  # i386 ABI
    ],
)
def test_filter_decisions(nr: int, arch: int, arg0: int, expected: int) -> None:
    assert _emulate(build_filter("x86_64"), nr, arch, arg0) == expected


def test_unknown_architecture_is_refused() -> None:
    with pytest.raises(ValueError, match="no seccomp filter"):
        build_filter("sparc")


# --- caps and results ----------------------------------------------------------------------


def test_capped_text_counts_characters_across_chunks() -> None:
    cap = CappedText(5)
    data = "héllo wörld".encode()
    for i in range(len(data)):  # split inside multibyte characters
        cap.feed(data[i : i + 1])
    cap.feed(b"", final=True)
    assert cap.text() == "héllo\n[6 characters omitted]" and cap.omitted == 6


def test_result_text() -> None:
    assert ExecResult(0, "out", "err").to_text() == "exit code 0\nout\nerr"
    killed = ExecResult(137, "", "", timed_out=True, duration_seconds=300.2).to_text()
    assert killed.startswith("exit code 137 (killed: wall timeout after 300 s)")


def test_limits_are_validated() -> None:
    with pytest.raises(Exception, match="must be positive"):
        SandboxLimits(max_processes=0)


@pytest.mark.parametrize("argv", ["ls -la", b"ls", [], ["ls", 3], ["a\0b"]])
async def test_argv_must_be_a_list_of_strings(argv: object) -> None:
    async with HostExecution() as box:
        with pytest.raises(TypeError):
            await box.run(argv)  # type: ignore[arg-type]


# --- bubblewrap command line ---------------------------------------------------------------


async def test_bwrap_argv_has_every_guard(tmp_path: Path) -> None:
    injection = "ls; --bind / /host $(reboot)"
    async with BubblewrapSandbox(tmp_path) as box:
        argv = box.argv(["bash", "-c", injection], seccomp_fd=7, info_fd=8)
        work = str(box.work.path)
    for flag in (
        "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
        "--disable-userns", "--new-session", "--die-with-parent",
    ):  # fmt: skip
        assert flag in argv
    pairs = list(itertools.pairwise(argv))
    assert ("--cap-drop", "ALL") in pairs and ("--seccomp", "7") in pairs
    assert ("--uid", "65534") in pairs and ("--info-fd", "8") in pairs
    assert ("--ro-bind", "/usr") in pairs and ("--tmpfs", "/tmp") in pairs
    assert argv[argv.index("--tmpfs") - 2] == "--size"
    assert "/" not in [b for a, b in pairs if a in ("--bind", "--ro-bind")]
    assert argv[-3:] == ["bash", "-c", injection]  # one argument, after "--"
    assert argv.index("--") < len(argv) - 3
    writable = [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
    assert writable == [work]  # the work copy is the only writable host folder


def test_bwrap_unavailable_when_missing() -> None:
    box = BubblewrapSandbox(bwrap="/nonexistent/bwrap")
    assert not box.available()


async def test_bwrap_run_refuses_when_missing() -> None:
    tool = shell_tool(BubblewrapSandbox(bwrap="/nonexistent/bwrap"))
    with pytest.raises(ToolFailure, match="the shell is unavailable: bubblewrap"):
        await tool.invoke({"command": "true"}, CTX)


# --- container backend ---------------------------------------------------------------------


def test_container_argv_follows_the_seed(tmp_path: Path) -> None:
    box = ContainerSandbox(tmp_path, engine="podman", image="img:1")
    work = box.work.create()
    try:
        argv = box.argv(["bash", "-c", "echo $HOME; rm -rf /"], name="tether-x", timeout=300)
    finally:
        box.work.remove()
    pairs = list(itertools.pairwise(argv))
    assert argv[:2] == ["podman", "run"] and "--rm" in argv and "--read-only" in argv
    for pair in [
        ("--network", "none"), ("--cap-drop", "ALL"), ("--security-opt", "no-new-privileges"),
        ("--user", "65534:65534"), ("--pids-limit", "256"), ("--cpus", "2"),
        ("--memory", str(1 << 30)), ("--name", "tether-x"), ("--pull", "never"), ("-w", "/work"),
    ]:  # fmt: skip
        assert pair in pairs, pair
    assert ("-v", f"{work}:/work:rw") in pairs
    assert argv[-8:] == [
        "img:1",
        "timeout",
        "-s",
        "KILL",
        "300",
        "bash",
        "-c",
        "echo $HOME; rm -rf /",
    ]


FAKE_ENGINE = """#!/bin/bash
echo "$*" >> "$FAKE_LOG"
case "$1" in
  info) exit ${FAKE_INFO_RC:-0} ;;
  rm) exit 0 ;;
  run) while [ "$1" != "img:1" ]; do shift; done; shift; exec "$@" ;;
esac
"""


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    engine = tmp_path / "fake-docker"
    engine.write_text(FAKE_ENGINE)
    engine.chmod(0o755)
    log = tmp_path / "engine.log"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setattr(container_module, "_engine_env", lambda: {"FAKE_LOG": str(log)})
    return engine, log


def test_engine_without_daemon_is_unavailable(
    fake_engine: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, _ = fake_engine
    monkeypatch.setenv("FAKE_INFO_RC", "1")
    assert not ContainerSandbox(executable=str(engine)).available()
    monkeypatch.setenv("FAKE_INFO_RC", "0")
    assert ContainerSandbox(executable=str(engine)).available()
    assert not ContainerSandbox(executable="/nonexistent/docker").available()


async def test_container_run_and_removal_on_cancel(fake_engine: tuple[Path, Path]) -> None:
    engine, log = fake_engine
    async with ContainerSandbox(executable=str(engine), image="img:1") as box:
        done = await box.run(["bash", "-c", "echo hi; exit 3"])
        assert (done.exit_code, done.stdout) == (3, "hi\n")
        task = asyncio.ensure_future(box.run(["sleep", "30"]))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    lines = log.read_text().splitlines()
    run_names = [line.split("--name ")[1].split()[0] for line in lines if line.startswith("run")]
    assert f"rm -f {run_names[1]}" in lines  # the cancelled container is removed by name


async def test_unavailable_engine_refuses_to_run(tmp_path: Path) -> None:
    box = ContainerSandbox(executable="/nonexistent/docker")
    with pytest.raises(SandboxUnavailable, match="not installed or not running"):
        await box.run(["true"])


# --- choice of backend and the host opt-in -------------------------------------------------


def test_select_prefers_bubblewrap() -> None:
    assert isinstance(select_sandbox(), BubblewrapSandbox)


def test_no_isolation_refuses_without_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bwrap_module, "_probe", lambda *_: False)
    monkeypatch.setattr(container_module, "_engine_answers", lambda _engine: False)
    with pytest.raises(SandboxUnavailable, match="allow_host=True"):
        select_sandbox()
    assert isinstance(select_sandbox(allow_host=True), HostExecution)


def test_shell_tool_refuses_host_without_opt_in() -> None:
    with pytest.raises(SandboxUnavailable, match="allow_host=True"):
        shell_tool(HostExecution())
    tool = shell_tool(HostExecution(), allow_host=True)
    assert "unconfined" in tool.spec.description


# --- the shell tool ------------------------------------------------------------------------


async def test_shell_tool_spec_and_result(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("TODO: one\n")
    async with BubblewrapSandbox(tmp_path) as box:
        tool = shell_tool(box)
        assert [f for f in lint([tool]) if f.severity == "error"] == []
        assert list(tool.spec.parameters["properties"]) == ["command"]
        out = await tool.invoke({"command": "grep -rn TODO .; echo oops >&2; exit 2"}, CTX)
    assert out == "exit code 2\n./notes.txt:1:TODO: one\n\noops\n"


@pytest.mark.parametrize(
    "arguments", [{}, {"command": ""}, {"command": 3}, {"command": "ls", "x": 1}]
)
async def test_shell_tool_validates(arguments: dict[str, object]) -> None:
    tool = shell_tool(HostExecution(), allow_host=True)
    with pytest.raises(InvalidArguments):
        await tool.invoke(arguments, CTX)


async def test_shell_tool_in_an_agent_loop(tmp_path: Path) -> None:
    async with BubblewrapSandbox(tmp_path) as box:
        client = ScriptedClient(
            [
                call_reply(("shell", {"command": "echo $((6 * 7)) > answer; cat answer"})),
                text_reply("42"),
            ]
        )
        result = await Agent(client, [shell_tool(box)]).run("compute")
        assert result.outcome.kind == "completed"
        tool_message = result.transcript[-2]
        assert tool_message.role == "tool"
        assert "exit code 0\n42\n" in str(tool_message.parts[0].content)  # type: ignore[union-attr]


def test_work_copy_keeps_links_as_links(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "link").symlink_to("/etc/hostname")
    os.mkfifo(src / "fifo")
    box = BubblewrapSandbox(src)
    work = box.work.create()
    try:
        assert os.readlink(work / "link") == "/etc/hostname" and not (work / "fifo").exists()
        if os.geteuid() == 0:
            assert (work.stat().st_uid, os.lstat(work / "link").st_uid) == (65534, 65534)
    finally:
        box.work.remove()
