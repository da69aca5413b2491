"""The host side of the bubblewrap sandbox, attacked for real: a command that tries to
outlive its call, fill memory or disk, pass odd commands, or write escapes to the model's
and the terminal's view."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import struct
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.errors import ConfigError
from tether.guards.sandbox import BubblewrapSandbox, SandboxLimits, _enter, shell_tool
from tether.tools import RunContext

LIMITS = SandboxLimits(timeout_seconds=30, memory_bytes=512 << 20, max_processes=64)
SANDBOX_UID = 200_000 + os.getpid() % 100_000
CTX: RunContext[None] = RunContext(deps=None)

CLEAR_PDEATHSIG = r'''
"""Make the sandbox's PID 1 outlive bwrap: inject, through ptrace, prctl(PR_SET_PDEATHSIG, 0)
and close(1), close(2) (so that the output pipes do not wait for it)."""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
NAMES = ("r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags"
         " rsp ss fs_base gs_base ds es fs gs").split()
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in NAMES]
def pt(req, addr=None, data=None):
    ctypes.set_errno(0)
    r = libc.ptrace(req, 1, addr, data)
    if r == -1 and ctypes.get_errno():
        raise SystemExit(f"ptrace: {os.strerror(ctypes.get_errno())}")
    return r
pt(0x4206)  # PTRACE_SEIZE
pt(0x4207)  # PTRACE_INTERRUPT
os.waitpid(1, 0x40000000)
saved = Regs(); pt(12, None, ctypes.byref(saved))
for nr, a in [(157, 1), (3, 1), (3, 2)]:
    regs = Regs.from_buffer_copy(saved)
    regs.rax, regs.rdi, regs.rsi, regs.rip, regs.orig_rax = nr, a, 0, saved.rip - 2, 2**64 - 1
    pt(13, None, ctypes.byref(regs)); pt(9); os.waitpid(1, 0x40000000)
pt(13, None, ctypes.byref(saved)); pt(17)
print("pid 1 cleared")
'''

ALLOW_ALL = struct.pack("=HBBI", 0x06, 0, 0, 0x7FFF0000)
"""A seccomp program that allows every call: the sandbox without its filter."""


def live_with(marker: str) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if marker in cmdline and state not in ("Z", "X"):
            found.add(int(entry))
    return found


@contextlib.contextmanager
def reaping(marker: str):
    """Kill whatever holds ``marker`` at the end, so that a failing test leaks nothing."""
    try:
        yield
    finally:
        for pid in live_with(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[BubblewrapSandbox]:
    (tmp_path / "clear_pdeathsig.py").write_text(CLEAR_PDEATHSIG)
    async with BubblewrapSandbox(tmp_path, limits=LIMITS, uid=SANDBOX_UID) as box:
        yield box


def daemon(marker: str) -> str:
    """Start a daemon that says it is up (in the work copy), then sleeps."""
    return (
        f"(setsid bash -c 'echo up > up.txt; exec sleep {marker}' </dev/null >/dev/null 2>&1 &);"
        " for _ in $(seq 100); do [ -e up.txt ] && break; sleep 0.05; done; echo started"
    )


# --- item 15: nothing outlives its command -------------------------------------------------


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the injection is x86-64 code")
async def test_ptrace_of_pid1_is_refused_and_a_daemon_dies_with_its_command(
    sandbox: BubblewrapSandbox,
) -> None:
    marker = "4242." + str(uuid.uuid4().int)[:8]
    with reaping(marker):
        result = await sandbox.run(["bash", "-c", f"python3 clear_pdeathsig.py; {daemon(marker)}"])
        assert "started" in result.stdout and not result.timed_out
        assert "ptrace: Operation not permitted" in result.stderr
        assert (sandbox.work.path / "up.txt").exists()  # it did start
        assert live_with(marker) == set()
        await sandbox.aclose()
        assert live_with(marker) == set()


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the injection is x86-64 code")
async def test_a_pid1_freed_from_bwrap_is_still_killed(tmp_path: Path) -> None:
    """Without the seccomp filter the injection works (PID 1 is the command's own shell,
    which loses its parent-death signal and its output); the daemon still dies with the
    command, because the PID namespace ends with it and tether kills its PID 1 anyway."""
    (tmp_path / "clear_pdeathsig.py").write_text(CLEAR_PDEATHSIG)
    box = BubblewrapSandbox(tmp_path, limits=LIMITS, uid=SANDBOX_UID)
    box.seccomp_filter = lambda: ALLOW_ALL  # type: ignore[method-assign]
    marker = "4343." + str(uuid.uuid4().int)[:8]
    with reaping(marker):
        async with box:
            result = await box.run(["bash", "-c", f"python3 clear_pdeathsig.py; {daemon(marker)}"])
            assert "pid 1 cleared" in result.stdout and not result.timed_out
            assert (box.work.path / "up.txt").exists()  # it did start
            assert live_with(marker) == set()


async def test_denied_calls_fail_inside(sandbox: BubblewrapSandbox) -> None:
    probe = r"""
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    ctypes.set_errno(0)
    r = getattr(libc, name)(*args)
    return errno.errorcode.get(ctypes.get_errno(), "ok") if r == -1 else "ok"
print("ptrace", call("ptrace", 16, 1, None, None))
print("unshare", call("unshare", 0x00020000))
print("mount", call("mount", b"none", b"/tmp", b"tmpfs", 0, None))
print("keyctl", call("syscall", 250 if os.uname().machine == "x86_64" else 219, 0, 0))
print("clone3", call("syscall", 435, None, 0))
for family, name in [(socket.AF_UNIX, "unix"), (socket.AF_INET, "inet"), (17, "packet")]:
    try:
        socket.socket(family, socket.SOCK_DGRAM if family != 17 else socket.SOCK_RAW).close()
        print(name, "ok")
    except OSError as exc:
        print(name, errno.errorcode[exc.errno])
"""
    result = await sandbox.run(["python3", "-c", probe])
    verdicts = dict(line.split() for line in result.stdout.splitlines())
    assert verdicts == {
        "ptrace": "EPERM", "unshare": "EPERM", "mount": "EPERM", "keyctl": "EPERM",
        "clone3": "ENOSYS", "unix": "EPERM", "inet": "ok", "packet": "EAFNOSUPPORT",
    }, result.stderr  # fmt: skip


async def test_aclose_leaves_no_process_of_the_sandbox(tmp_path: Path) -> None:
    uid = SANDBOX_UID + 1
    box = BubblewrapSandbox(tmp_path, limits=LIMITS, uid=uid)
    await box.run(["true"])
    await box.run(["bash", "-c", "sleep 30 & echo bg"])
    assert _pids_of(uid)  # the holder and the sandbox made ready for the next command
    await box.aclose()
    await asyncio.sleep(0.1)
    assert _pids_of(uid) == set()


def _pids_of(uid: int) -> set[int]:
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid != uid:
                    continue
                with open(f"/proc/{entry}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                        continue
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            pids.add(int(entry))
    return pids


# --- item 16: every writable in-memory mount is capped -------------------------------------


async def test_root_and_dev_are_read_only_and_memory_mounts_are_capped(
    sandbox: BubblewrapSandbox,
) -> None:
    shared = LIMITS.tmp_bytes + LIMITS.shm_bytes + (1 << 20)  # one scratch space for all three
    fills = "; ".join(
        f"head -c {shared + (1 << 20)} /dev/zero > {where}/fill 2>/dev/null || echo {where} full;"
        f" rm -f {where}/fill"
        for where in ("/dev/shm", "/tmp", "/run")
    )
    command = (
        "for f in /x /etc/x /dev/x /usr/x; do echo x > $f 2>/dev/null || echo $f read-only; "
        f"done; {fills}; echo > /dev/null && echo null writable"
    )
    result = await sandbox.run(["bash", "-c", command])
    lines = set(result.stdout.splitlines())
    assert {"/x read-only", "/etc/x read-only", "/dev/x read-only", "/usr/x read-only"} <= lines
    assert {"/dev/shm full", "/tmp full", "/run full", "null writable"} <= lines


async def test_loopback_is_up_and_private(sandbox: BubblewrapSandbox) -> None:
    """docs/sandbox.md: the network namespace has its own loopback, up: programs in one
    command can talk to each other on 127.0.0.1, never to the host's."""
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    script = (
        f"import socket, threading; s = socket.create_server(('127.0.0.1', {port})); "
        "threading.Thread(target=lambda: s.accept()[0].sendall(b'inside'), daemon=True).start(); "
        f"c = socket.create_connection(('127.0.0.1', {port})); print(c.recv(6).decode())"
    )
    try:
        result = await sandbox.run(["python3", "-c", script])
    finally:
        server.close()
    assert result.stdout.strip() == "inside", result.stderr


# --- item 17: long commands, and commands that look like options ---------------------------


async def test_a_200_kb_command_runs(sandbox: BubblewrapSandbox) -> None:
    tool = shell_tool(sandbox)
    body = "x" * 200_000
    out = await tool.invoke({"command": f"v='{body}'; echo ${{#v}}; cat /dev/stdin"}, CTX)
    assert out.startswith("exit code 0\n200000\n")


async def test_a_command_starting_with_a_dash_is_a_command(sandbox: BubblewrapSandbox) -> None:
    out = await shell_tool(sandbox).invoke({"command": "--version"}, CTX)
    assert out.startswith("exit code 127") and "GNU bash" not in out
    out = await shell_tool(sandbox).invoke({"command": "-x; echo after"}, CTX)
    assert "after" in out


# --- item 18: disk and total caps ----------------------------------------------------------


async def test_the_work_copy_cannot_fill_the_host_disk(tmp_path: Path) -> None:
    limits = SandboxLimits(work_bytes=64 << 20, file_size_bytes=32 << 20)
    (tmp_path / "seed.txt").write_text("seed\n")
    async with BubblewrapSandbox(tmp_path, limits=limits, uid=SANDBOX_UID) as box:
        command = (
            "for i in 1 2 3 4; do head -c 30000000 /dev/zero > f$i || echo full; done; "
            "du -sk . | cut -f1"
        )
        result = await box.run(["bash", "-c", command])
        assert "full" in result.stdout, result.stderr
        assert int(result.stdout.split()[-1]) <= 64 << 10
        assert result.enforcement is not None and result.enforcement.work_disk
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed.txt"]  # noqa: ASYNC240


async def test_enforcement_says_what_binds_here(sandbox: BubblewrapSandbox) -> None:
    from tether.guards.sandbox import _cgroup as cgroup_module

    support = cgroup_module.detect()
    result = await sandbox.run(["true"])
    enforced = result.enforcement
    assert enforced is not None
    assert enforced.total_memory == ("memory" in support.controllers)
    assert enforced.total_processes == ("pids" in support.controllers)
    assert enforced.cpu_share == ("cpu" in support.controllers)
    # by default a per-command cgroup is made only where a controller binds in it
    assert enforced.kill == ("cgroup" if support.controllers else "pid namespace")
    if not enforced.total_memory:
        assert "Not capped: total memory" in enforced.note and support.reason in enforced.note
    assert enforced.note in shell_tool(sandbox).spec.description


async def test_each_command_runs_in_its_own_cgroup_where_one_can_be_made(
    tmp_path: Path,
) -> None:
    from tether.guards.sandbox import _cgroup as cgroup_module

    support = cgroup_module.detect()
    sandbox = BubblewrapSandbox(tmp_path, limits=LIMITS, uid=SANDBOX_UID, cgroups=True)
    await sandbox.open()
    marker = "4545." + str(uuid.uuid4().int)[:8]
    with reaping(marker):
        task = asyncio.ensure_future(sandbox.run(["bash", "-c", f"sleep {marker}"]))
        for _ in range(200):
            if live_with(f"sleep {marker}"):
                break
            await asyncio.sleep(0.02)
        (pid,) = live_with(f"sleep {marker}")
        line = next(
            x
            for x in Path(f"/proc/{pid}/cgroup").read_text().splitlines()  # noqa: ASYNC240
            if x.startswith("0::")
        )
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert live_with(marker) == set()
        result = await sandbox.run(["true"])
        await sandbox.aclose()
    assert result.enforcement is not None
    assert result.enforcement.kill == ("cgroup" if support.parent else "pid namespace")
    if support.parent is None:  # the PID namespace kill is the only one
        assert "tether-" not in line
        return
    assert support.parent is not None
    session, name = line.rsplit("/", 2)[-2:]  # the session's cgroup holds the command's
    folder = support.parent / session / name
    assert session.startswith("tether-session-") and name.startswith("tether-")
    assert not folder.exists() and not folder.parent.exists()  # both removed


async def test_total_memory_is_capped_where_a_memory_cgroup_binds(
    sandbox: BubblewrapSandbox,
) -> None:
    """Three processes of 200 MiB each: over the 512 MiB total, under the per-process cap."""
    hog = 'perl -e \'$x = "a" x (200 * 1024**2); sleep 2; print "held\\n"\''
    result = await sandbox.run(["bash", "-c", f"{hog} & {hog} & {hog} & wait"])
    held = result.stdout.count("held")
    assert result.enforcement is not None
    if result.enforcement.total_memory:
        assert held < 3
    else:  # no memory controller delegated: only the statement, which must say so
        assert held == 3 and "total memory" in result.enforcement.note


# --- item 19: output is safe to show -------------------------------------------------------


async def test_control_characters_and_bad_utf8_are_escaped(sandbox: BubblewrapSandbox) -> None:
    command = r"printf 'a\033[31mred\033]0;title\007\000nul\377\r\xe2\x80\xaeevil\tok\n'"
    out = await shell_tool(sandbox).invoke({"command": command}, CTX)
    assert "a\\x1b[31mred\\x1b]0;title\\x07\\x00nul\\xff\\x0d\\u202eevil\tok\n" in out
    assert not any(ch in out for ch in "\x1b\x00\r\x07\u202e")


async def test_a_tree_larger_than_the_work_space_is_refused_clearly(tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(b"\1" * (3 << 20))
    box = BubblewrapSandbox(tmp_path, limits=SandboxLimits(work_bytes=1 << 20), uid=SANDBOX_UID)
    with pytest.raises(ConfigError, match="does not fit in the sandbox's work space"):
        await box.open()
    await box.aclose()


async def test_concurrent_commands_each_get_their_own_sandbox(
    sandbox: BubblewrapSandbox,
) -> None:
    command = "echo {i} > /tmp/mine; echo {i} > f{i}; sleep 0.3; cat /tmp/mine f{i}"
    results = await asyncio.gather(
        *(sandbox.run(["bash", "-c", command.format(i=i)]) for i in range(3))
    )
    assert [r.stdout.split() for r in results] == [["0", "0"], ["1", "1"], ["2", "2"]]
    listing = await sandbox.run(["bash", "-c", "ls f*; ls /tmp"])
    assert listing.stdout.split() == ["f0", "f1", "f2"]  # the copy is shared, /tmp is not


FAKE_SYSTEMD_RUN = """#!/bin/bash
echo "$*" >> {log}
while [ "$1" != "--" ]; do shift; done; shift; exec "$@"
"""


def _fake_systemd_run() -> tuple[Path, Path]:
    """A folder with the stand-in, and its log, that the sandbox user can run and write."""
    fake_bin = Path(tempfile.mkdtemp(prefix="tether-fake-systemd-"))
    fake_bin.chmod(0o755)
    log = fake_bin / "systemd.log"
    log.touch()
    log.chmod(0o666)
    (fake_bin / "systemd-run").write_text(FAKE_SYSTEMD_RUN.format(log=log))
    (fake_bin / "systemd-run").chmod(0o755)
    return fake_bin, log


async def test_systemd_scopes_carry_the_caps_where_systemd_run_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stand-in ``systemd-run`` that runs the command without a scope: the caps reach
    its command line, and the kill does not trust a cgroup that is not a scope."""
    fake_bin, log = _fake_systemd_run()
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    limits = SandboxLimits(memory_bytes=300 << 20, max_processes=40, cpus=1.5)
    marker = "4646." + str(uuid.uuid4().int)[:8]
    with reaping(marker):
        async with BubblewrapSandbox(limits=limits, uid=SANDBOX_UID) as box:
            result = await box.run(["bash", "-c", f"(setsid sleep {marker} &); echo ran"])
            assert live_with(marker) == set()
    assert result.stdout == "ran\n" and result.enforcement is not None
    assert result.enforcement.total_memory and result.enforcement.cpu_share
    assert result.enforcement.kill == "cgroup" and "systemd scope" in result.enforcement.note
    lines = log.read_text().splitlines()  # the probe, then each command sandbox
    shutil.rmtree(fake_bin)
    calls = [line for line in lines if line.startswith("--scope --quiet --collect")]
    assert len(calls) >= 2
    assert f"MemoryMax={300 << 20} -p MemorySwapMax=0 -p TasksMax=40 -p CPUQuota=150%" in calls[1]
    assert f" -- {_enter.perl() or 'nsenter'} " in calls[1]  # the scope holds the sandbox
