"""Sandbox pieces tested on their own: the BPF program, output caps, command lines, the
container backend against a fake engine, backend choice and the shell tool."""

from __future__ import annotations

import asyncio
import codecs
import errno
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
    seccomp,
    select_sandbox,
    shell_tool,
)
from tether.guards.sandbox import bwrap as bwrap_module
from tether.guards.sandbox import container as container_module
from tether.guards.sandbox._cgroup import (
    CONTROLLERS,
    CgroupSupport,
    CommandCgroup,
    SessionCgroup,
    session_memory_bytes,
)
from tether.guards.sandbox._enter import SCRATCH, scratch_script
from tether.guards.sandbox._output import CappedText, escape_controls
from tether.guards.sandbox._session import mount_work
from tether.guards.sandbox._systemd import killable
from tether.guards.sandbox.seccomp import build_filter
from tether.loop import Agent
from tether.providers.scripted import ScriptedClient, call_reply, text_reply
from tether.tools import RunContext, lint

CTX: RunContext[None] = RunContext(deps=None)
RET_ALLOW, RET_KILL_PROCESS = 0x7FFF0000, 0x80000000


# --- seccomp: the policy, audited against the compiled filter -----------------------------

_AUDIT_X86_64, _AUDIT_AARCH64 = 0xC000003E, 0xC00000B7
_RET_ERRNO = 0x00050000


def _run_bpf(program: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """A classic-BPF interpreter (every opcode seccomp filters may use) over seccomp_data."""
    full = (*args, *[0] * (6 - len(args)))
    data = struct.pack("=iIQ6Q", nr, arch, 0, *full)
    prog = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    pc, a, x, mem = 0, 0, 0, [0] * 16
    alu = {
        0x00: lambda p, q: p + q, 0x10: lambda p, q: p - q, 0x20: lambda p, q: p * q,
        0x30: lambda p, q: p // q, 0x40: lambda p, q: p | q, 0x50: lambda p, q: p & q,
        0x60: lambda p, q: p << q, 0x70: lambda p, q: p >> q, 0x90: lambda p, q: p % q,
        0xA0: lambda p, q: p ^ q,
    }  # fmt: skip
    jumps = {
        0x10: lambda p, q: p == q, 0x20: lambda p, q: p > q, 0x30: lambda p, q: p >= q,
        0x40: lambda p, q: bool(p & q),
    }  # fmt: skip
    while True:
        code, jt, jf, k = prog[pc]
        cls, pc = code & 0x07, pc + 1
        if cls == 0x00:  # LD
            mode = code & 0xE0
            a = {0x00: k, 0x20: None, 0x60: mem[k % 16], 0x80: len(data)}.get(mode)
            if mode == 0x20:
                a = struct.unpack_from("=I", data, k)[0]
            assert a is not None, hex(code)
        elif cls == 0x01:  # LDX
            x = k if code & 0xE0 == 0x00 else mem[k % 16]
        elif cls == 0x02:
            mem[k % 16] = a
        elif cls == 0x03:
            mem[k % 16] = x
        elif cls == 0x04:  # ALU
            operand = x if code & 0x08 else k
            a = (-a if code & 0xF0 == 0x80 else alu[code & 0xF0](a, operand)) & 0xFFFFFFFF
        elif cls == 0x05:  # JMP
            if code & 0xF0 == 0x00:
                pc += k
            else:
                pc += jt if jumps[code & 0xF0](a, x if code & 0x08 else k) else jf
        elif cls == 0x06:  # RET
            return a if code & 0x18 == 0x10 else k
        else:  # MISC: TAX, TXA
            x, a = (a, a) if code & 0xF8 == 0x00 else (x, x)


@pytest.mark.parametrize(
    ("machine", "audit"), [("x86_64", _AUDIT_X86_64), ("aarch64", _AUDIT_AARCH64)]
)
def test_seccomp_policy_is_what_the_tables_say(machine: str, audit: int) -> None:
    import pyseccomp

    arch = getattr(pyseccomp.Arch, machine.upper())
    program = build_filter(machine)

    def verdict(name: str, *args: int) -> int:
        return _run_bpf(program, pyseccomp.resolve_syscall(arch, name), audit, args)

    checked = 0
    for name in seccomp.ALLOWED:
        if pyseccomp.resolve_syscall(arch, name) >= 0:
            assert verdict(name) == RET_ALLOW, name
            checked += 1
    for name in seccomp.DENIED:
        if pyseccomp.resolve_syscall(arch, name) >= 0:
            assert verdict(name) == _RET_ERRNO | errno.EPERM, name
            checked += 1
    assert checked > 250
    assert verdict("clone3") == _RET_ERRNO | errno.ENOSYS  # unlisted: as if absent
    assert _run_bpf(program, 999, audit) == _RET_ERRNO | errno.ENOSYS
    assert verdict("clone", 17) == RET_ALLOW  # fork: SIGCHLD only
    for flag in (0x20000, 0x2000000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000):
        assert verdict("clone", flag | 17) == _RET_ERRNO | errno.EPERM, hex(flag)
    assert verdict("socket", 1) == _RET_ERRNO | errno.EPERM  # AF_UNIX
    assert verdict("socket", (1 << 32) | 1) == _RET_ERRNO | errno.EPERM  # high bits ignored
    assert verdict("socket", 2) == verdict("socket", 10) == verdict("socket", 16) == RET_ALLOW
    assert verdict("socket", 17) == _RET_ERRNO | errno.EAFNOSUPPORT  # AF_PACKET
    assert verdict("personality", 0) == RET_ALLOW
    assert verdict("personality", 0x0040000) == _RET_ERRNO | errno.ENOSYS  # ADDR_NO_RANDOMIZE
    foreign = 0x40000003 if machine == "x86_64" else 0x40000028  # i386, arm
    assert _run_bpf(program, 0, foreign) == RET_KILL_PROCESS


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_setting_extended_attributes_is_refused_unless_asked(machine: str) -> None:
    import pyseccomp

    arch = getattr(pyseccomp.Arch, machine.upper())
    audit = _AUDIT_X86_64 if machine == "x86_64" else _AUDIT_AARCH64
    refused, allowed = build_filter(machine), build_filter(machine, xattrs=True)
    for name in ("setxattr", "lsetxattr", "fsetxattr"):
        nr = pyseccomp.resolve_syscall(arch, name)
        assert _run_bpf(refused, nr, audit) == _RET_ERRNO | errno.EOPNOTSUPP, name
        assert _run_bpf(allowed, nr, audit) == RET_ALLOW, name
    for name in ("getxattr", "listxattr", "removexattr"):  # reading or freeing costs nothing
        assert _run_bpf(refused, pyseccomp.resolve_syscall(arch, name), audit) == RET_ALLOW


def test_seccomp_numbers_are_anchored() -> None:
    """The names resolve to the kernel's numbers (ptrace, socket) on both architectures."""
    import pyseccomp

    assert pyseccomp.resolve_syscall(pyseccomp.Arch.X86_64, "ptrace") == 101
    assert pyseccomp.resolve_syscall(pyseccomp.Arch.AARCH64, "ptrace") == 117
    assert pyseccomp.resolve_syscall(pyseccomp.Arch.X86_64, "socket") == 41


def test_x32_calls_kill_the_process() -> None:
    program = build_filter("x86_64")
    assert _run_bpf(program, 0x40000000 + 41, _AUDIT_X86_64, (2,)) == RET_KILL_PROCESS


def test_unknown_architecture_is_refused() -> None:
    with pytest.raises(ValueError, match="no seccomp filter"):
        build_filter("sparc")


# --- caps and results ----------------------------------------------------------------------


def test_capped_text_counts_bytes_past_the_cap_across_chunks() -> None:
    cap = CappedText(5)
    data = "héllo wörld".encode()
    for i in range(len(data)):  # split inside multibyte characters
        cap.feed(data[i : i + 1])
    cap.feed(b"", final=True)
    assert cap.text() == "héllo\n[7 bytes omitted]" and cap.omitted == 7
    escaped = CappedText(5)  # an escape that does not fit whole is left out whole
    escaped.feed(b"ab\x1bcd", final=True)
    assert escaped.text() == "ab\n[3 bytes omitted]"


def test_past_the_cap_output_is_counted_not_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    """A flood of binary output costs no decoding past the cap (it stalled the event loop)."""
    decoded: list[int] = []
    real = codecs.getincrementaldecoder("utf-8")

    class Counting(real):  # type: ignore[misc,valid-type]
        def decode(self, data: bytes, final: bool = False) -> str:
            decoded.append(len(data))
            return super().decode(data, final)

    monkeypatch.setattr(codecs, "getincrementaldecoder", lambda name: Counting)
    cap = CappedText(4000)
    chunk = bytes(range(128, 256)) * 512  # 64 KiB of invalid UTF-8
    for _ in range(160):  # 10 MiB
        cap.feed(chunk)
    cap.feed(b"", final=True)
    assert sum(decoded) <= 4 * 4000
    assert cap.omitted == 160 * len(chunk) - cap.shown
    assert cap.text().startswith("\\x80\\x81") and cap.kept_chars <= 4000


def test_result_text() -> None:
    assert ExecResult(0, "out", "err").to_text() == "exit code 0\nout\nerr"
    killed = ExecResult(-9, "", "", timed_out=True, duration_seconds=300.2).to_text()
    assert killed.startswith("exit code -9 (killed: wall timeout after 300 s)")


def test_limits_are_validated() -> None:
    with pytest.raises(Exception, match="must be positive"):
        SandboxLimits(max_processes=0)


@pytest.mark.parametrize("argv", ["ls -la", b"ls", [], ["ls", 3], ["a\0b"]])
async def test_argv_must_be_a_list_of_strings(argv: object) -> None:
    async with HostExecution() as box:
        with pytest.raises(TypeError):
            await box.run(argv)  # type: ignore[arg-type]


# --- bubblewrap command line ---------------------------------------------------------------


def test_bwrap_argv_has_every_guard() -> None:
    injection = "ls; --bind / /host $(reboot)"
    box = BubblewrapSandbox(limits=SandboxLimits(shm_bytes=5 << 20, tmp_bytes=7 << 20))
    argv = box.argv(["bash", "-c", injection], seccomp_fd=7, info_fd=8)
    for flag in (
        "--unshare-user", "--unshare-pid", "--as-pid-1", "--unshare-net", "--unshare-ipc",
        "--unshare-uts", "--disable-userns", "--new-session", "--die-with-parent",
    ):  # fmt: skip
        assert flag in argv
    pairs = list(itertools.pairwise(argv))
    assert ("--cap-drop", "ALL") in pairs and ("--seccomp", "7") in pairs
    assert ("--uid", "65534") in pairs and ("--info-fd", "8") in pairs
    assert ("--ro-bind", "/usr") in pairs
    assert "--tmpfs" not in argv  # bwrap cannot cap inodes: the scratch space is premounted
    scratch = scratch_script(box.limits)
    assert f"size={(5 << 20) + (7 << 20) + (1 << 20)},nr_inodes=10000," in scratch
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--remount-ro"] == ["/dev", "/"]
    assert argv.index("--remount-ro") > argv.index("/dev/shm")  # after the mounts it guards
    assert "/" not in [b for a, b in pairs if a in ("--bind", "--ro-bind")]
    assert argv[-3:] == ["bash", "-c", injection]  # one argument, after "--"
    assert argv.index("--") < len(argv) - 3
    writable = {argv[i + 2]: argv[i + 1] for i, a in enumerate(argv) if a == "--bind"}
    assert writable == {  # the scratch space and the holder's capped copy, nothing else
        "/dev/shm": f"{SCRATCH}/shm", "/tmp": f"{SCRATCH}/tmp", "/run": f"{SCRATCH}/run",
        "/work": "/work",
    }  # fmt: skip
    assert ("--chdir", "/") in pairs  # the boot script enters /work: a lock cannot brick it


def test_holder_keeps_the_copy_in_a_capped_memory_file_system() -> None:
    box = BubblewrapSandbox(limits=SandboxLimits(work_bytes=3 << 20), mount_point="/src")
    argv = box.holder_argv(info_fd=5, passwd_fd=6, group_fd=7)
    assert ("--dir", "/src") in list(itertools.pairwise(argv))
    assert f"size={3 << 20},nr_inodes=100000,mode=0755 tether-work /src" in mount_work(box)
    assert argv[argv.index("--cap-add") + 1] == "CAP_SYS_ADMIN"  # to mount it, nothing more
    assert "--disable-userns" not in argv  # the command sandboxes nest in it
    assert ("--info-fd", "5") in list(itertools.pairwise(argv))


def test_boot_script_closes_tether_descriptors_and_execs_the_argv() -> None:
    script = BubblewrapSandbox().boot_script(request_fd=9, argv_fd=10, close_fds=[11, 12])
    assert "exec 11>&- 12>&-" in script and "read -r -n 1 _ <&9 || exit 0" in script
    assert "mapfile -d '' -t argv <&10" in script and "exec 9<&- 10<&-" in script
    assert script.endswith('exec "${argv[@]}"\n')


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
    "arguments",
    [{}, {"command": ""}, {"command": 3}, {"command": "ls", "x": 1}, {"command": "x" * 1_000_001}],
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


async def test_work_copy_keeps_links_as_links_and_skips_specials(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "link").symlink_to("/etc/hostname")
    (src / "sub" / "a.txt").write_text("a\n")
    os.link(src / "sub" / "a.txt", src / "hard.txt")
    (src / "skip.log").write_text("x")
    os.mkfifo(src / "fifo")
    async with BubblewrapSandbox(src, ignore=["*.log"]) as box:
        result = await box.run(
            ["bash", "-c", "readlink link; ls -A | sort | tr '\\n' ' '; echo; "
             "echo b >> hard.txt; cat sub/a.txt; stat -c %u ."]
        )  # fmt: skip
    lines = result.stdout.splitlines()
    assert lines[0] == "/etc/hostname"
    assert lines[1].split() == ["hard.txt", "link", "sub"]  # no FIFO, no ignored file
    assert lines[2] == "a"  # the hard link became a separate file
    assert lines[3] == "65534"


def test_output_escapes_controls_but_newline_and_tab() -> None:
    escaped = "a\\x1b[0m\\x0d\n\tb\\x7f\\x9b\\u202e"
    assert escape_controls("a\x1b[0m\r\n\tb\x7f\x9b\u202e") == escaped
    cap = CappedText(100)
    cap.feed(b"ok\xff\x00\xe2\x80")  # bad byte, NUL, a character cut at the chunk's end
    cap.feed(b"\x99!", final=True)
    assert cap.text() == "ok\\xff\\x00\u2019!"


def test_command_cgroup_writes_every_bound_cap(tmp_path: Path) -> None:
    limits = SandboxLimits(memory_bytes=300 << 20, max_processes=42, cpus=1.5)
    support = CgroupSupport(tmp_path, frozenset(CONTROLLERS), "")
    cgroup = CommandCgroup(support, limits)
    written = {p.name: p.read_text() for p in cgroup.path.iterdir()}
    assert written == {
        "memory.max": str(300 << 20),
        "memory.swap.max": "0",
        "pids.max": "42",
        "cpu.max": "150000 100000",
    }
    only_pids = CommandCgroup(CgroupSupport(tmp_path, frozenset({"pids"}), "no"), limits)
    assert sorted(p.name for p in only_pids.path.iterdir()) == ["pids.max"]


async def test_a_session_cgroup_caps_the_session_and_holds_its_commands(tmp_path: Path) -> None:
    limits = SandboxLimits(work_bytes=100 << 20, memory_bytes=200 << 20, tmp_bytes=10 << 20)
    support = CgroupSupport(tmp_path, frozenset(CONTROLLERS), "")
    session = SessionCgroup(support, limits, commands=2)
    assert session.path.parent == tmp_path and session.holder.parent == session.path
    scratch = (10 << 20) + limits.shm_bytes + (1 << 20)
    expected = (100 << 20) + limits.kernel_memory_bytes(2) + 2 * ((200 << 20) + scratch)
    assert (session.path / "memory.max").read_text() == str(expected)
    assert session_memory_bytes(limits, 2) == expected
    assert session.commands.parent == session.path  # command cgroups are made inside
    command = CommandCgroup(session.commands, limits)
    assert command.path.parent == session.path
    # what commands get is what could be enabled in the session (nothing in a plain folder)
    assert session.commands.controllers == frozenset()


async def test_an_oversized_command_is_refused_with_a_way_forward() -> None:
    tool = shell_tool(HostExecution(), allow_host=True)
    with pytest.raises(InvalidArguments, match="over the 1,000,000-byte limit; write a long"):
        await tool.invoke({"command": "é" * 600_000}, CTX)  # 1.2 MB in UTF-8


async def test_a_lone_surrogate_is_refused_with_a_clear_result() -> None:
    """It raised UnicodeEncodeError out of the tool ("Tool 'shell' failed.")."""
    tool = shell_tool(BubblewrapSandbox())
    with pytest.raises(InvalidArguments, match=r"lone surrogate \(U\+DC80\) at character 5"):
        await tool.invoke({"command": "echo \udc80"}, CTX)
    with pytest.raises(TypeError, match="lone surrogate"):
        await HostExecution().run(["echo", "\ud800"])


async def test_a_command_that_cannot_start_is_a_clear_tool_failure(tmp_path: Path) -> None:
    class Broken(HostExecution):
        async def run(self, argv, *, timeout=None, stdin=None):  # type: ignore[no-untyped-def]  # noqa: ASYNC109
            raise OSError(7, "Argument list too long")

    tool = shell_tool(Broken(), allow_host=True)
    with pytest.raises(ToolFailure, match="could not be started \\(Argument list too long\\)"):
        await tool.invoke({"command": "true"}, CTX)


@pytest.mark.parametrize(
    ("path", "own", "ok"),
    [
        ("/user.slice/user-1000.slice/run-r1.scope", "/user.slice/session-2.scope", True),
        ("/user.slice/session-2.scope", "/user.slice/session-2.scope", False),  # tether's own
        ("/app.scope", "/app.scope/tether", False),  # above tether
        ("/user.slice", "/other.scope", False),  # not a scope
    ],
)
def test_only_a_command_scope_is_ever_killed(path: str, own: str, ok: bool) -> None:
    assert killable(path, own) is ok
