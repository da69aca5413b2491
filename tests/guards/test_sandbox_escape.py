"""The sandbox escape suite: each attack runs in bubblewrap (must fail) and, where it is
safe to do so, on the unconfined host as a control (must succeed), which proves that the
test would catch the escape if isolation were removed."""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import socket
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tether.guards.sandbox import BubblewrapSandbox, HostExecution, SandboxLimits

LIMITS = SandboxLimits(timeout_seconds=20, memory_bytes=512 << 20, max_processes=64)
SANDBOX_UID = 200_000 + os.getpid() % 100_000
"""A host uid of its own for this test run: processes are counted by it, unaffected by
other sandboxes running on the machine, and the process limit is ours alone."""

UNIX_CONNECT = (
    'perl -MSocket -e \'socket(my $s, AF_UNIX, SOCK_STREAM, 0) or die "socket: $!\\n"; '
    'connect($s, pack_sockaddr_un($ARGV[0])) or die "connect: $!\\n"; print "connected\\n"\''
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "file.txt").write_text("original\n")
    (src / "other.txt").write_text("keep me\n")
    return src


@pytest.fixture
async def sandbox(tree: Path) -> AsyncIterator[BubblewrapSandbox]:
    box = BubblewrapSandbox(tree, limits=LIMITS, uid=SANDBOX_UID)
    assert box.available(), "bubblewrap must be installed and able to create namespaces"
    async with box:
        yield box


@pytest.fixture
async def host(tree: Path) -> AsyncIterator[HostExecution]:
    async with HostExecution(tree, limits=LIMITS) as box:
        yield box


@pytest.fixture
def root_secret() -> Callable[[], tuple[Path, str]]:
    made: list[Path] = []

    def make() -> tuple[Path, str]:
        path = Path("/root") / f".tether-test-secret-{uuid.uuid4().hex}"
        token = uuid.uuid4().hex
        path.write_text(token)
        path.chmod(0o600)
        made.append(path)
        return path, token

    yield make  # type: ignore[misc]
    for path in made:
        path.unlink(missing_ok=True)


def sandbox_pids() -> set[int]:
    """Live host processes of this run's sandbox user (zombies are dead: bwrap leaves its
    namespace's init for the host's init to reap)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid != SANDBOX_UID:
                    continue
                with open(f"/proc/{entry}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            if state not in ("Z", "X"):
                pids.add(int(entry))
    return pids


def live_with(marker: str) -> set[int]:
    """Live processes (any user) whose command line holds ``marker``."""
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
        if marker in cmdline and state not in ("Z", "X") and int(entry) != os.getpid():
            found.add(int(entry))
    return found


async def sh(box: BubblewrapSandbox | HostExecution, command: str, **kw: float):
    return await box.run(["bash", "-c", command], **kw)


# --- network -------------------------------------------------------------------------------


async def test_tcp_to_host_loopback_fails(sandbox: BubblewrapSandbox, host: HostExecution):
    accepted: list[int] = []

    async def on_connect(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        accepted.append(1)
        w.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    probe = f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected"
    try:
        boxed = await sh(sandbox, probe)
        assert boxed.exit_code != 0
        assert "connected" not in boxed.stdout
        assert accepted == []
        control = await sh(host, probe)
        await asyncio.sleep(0.1)
        assert "connected" in control.stdout and accepted == [1]
    finally:
        server.close()
        await server.wait_closed()


async def test_no_network_interface_but_loopback(sandbox: BubblewrapSandbox):
    result = await sh(sandbox, "ls /sys/class/net 2>/dev/null; cat /proc/net/dev")
    assert "eth0" not in result.stdout and "lo:" in result.stdout


# --- Unix sockets --------------------------------------------------------------------------


@pytest.fixture
def host_unix_socket():
    folder = Path(tempfile.mkdtemp(prefix="tether-sock-"))
    folder.chmod(0o755)  # reachable by the sandbox user, were it mounted
    path = folder / "host.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(5)
    server.setblocking(False)
    yield path, server
    server.close()
    shutil.rmtree(folder)


async def test_host_unix_socket_unreachable(
    sandbox: BubblewrapSandbox, host: HostExecution, host_unix_socket: tuple[Path, socket.socket]
):
    path, _server = host_unix_socket
    boxed = await sh(sandbox, f"{UNIX_CONNECT} {shlex.quote(str(path))}")
    assert boxed.exit_code != 0 and "connected" not in boxed.stdout
    control = await sh(host, f"{UNIX_CONNECT} {shlex.quote(str(path))}")
    assert "connected" in control.stdout


async def test_unix_socket_blocked_even_when_mounted(
    tree: Path, host_unix_socket: tuple[Path, socket.socket]
):
    """The seccomp filter, alone: the socket's folder is mounted, connecting still fails."""
    path, server = host_unix_socket
    box = BubblewrapSandbox(
        tree, limits=LIMITS, uid=SANDBOX_UID, ro_binds=[(str(path.parent), "/hostsock")]
    )
    async with box:
        result = await sh(box, f"{UNIX_CONNECT} /hostsock/host.sock")
    assert "socket: Operation not permitted" in result.stderr
    with pytest.raises(BlockingIOError):
        server.accept()


async def test_unix_socket_and_socketpair_creation_fail_with_eperm(sandbox: BubblewrapSandbox):
    script = (
        "perl -MSocket -e '"
        'socket(my $s, AF_UNIX, SOCK_DGRAM, 0) or print "socket: $!\\n"; '
        'socketpair(my $a, my $b, AF_UNIX, SOCK_STREAM, 0) or print "socketpair: $!\\n"; '
        'socket(my $i, AF_INET, SOCK_STREAM, 0) and print "inet: ok\\n"\''
    )
    result = await sh(sandbox, script)
    assert "socket: Operation not permitted" in result.stdout
    assert "socketpair: Operation not permitted" in result.stdout
    assert "inet: ok" in result.stdout  # the filter is specific to AF_UNIX


# --- disk ----------------------------------------------------------------------------------


async def test_writes_outside_the_work_copy_do_not_reach_the_host(
    sandbox: BubblewrapSandbox, host: HostExecution, tmp_path: Path
):
    name = f".tether-escape-{uuid.uuid4().hex}"
    outside = tmp_path / "outside"
    outside.mkdir()
    targets = [
        f"/usr/{name}",
        f"/etc/{name}",
        f"/tmp/{name}",
        f"/var/tmp/{name}",
        str(outside / name),
    ]
    command = "; ".join(f"echo pwned > {t}" for t in targets) + "; echo done"
    result = await sh(sandbox, command)
    assert "done" in result.stdout
    assert "Read-only file system" in result.stderr
    assert not [t for t in targets if os.path.lexists(t)]  # noqa: ASYNC240
    control = await sh(host, f"echo pwned > {outside / name}")
    assert control.exit_code == 0 and (outside / name).read_text() == "pwned\n"


async def test_root_secret_is_unreadable(
    sandbox: BubblewrapSandbox, host: HostExecution, root_secret: Callable[[], tuple[Path, str]]
):
    path, token = root_secret()
    boxed = await sh(sandbox, f"cat {path}; ls -la /root; grep -rs {token} /etc /tmp /work")
    assert token not in boxed.stdout + boxed.stderr
    control = await sh(host, f"cat {path}")
    assert token in control.stdout


async def test_symlinks_in_the_tree_do_not_lead_out(
    tmp_path: Path, root_secret: Callable[[], tuple[Path, str]]
):
    secret, token = root_secret()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("intact\n")
    src = tmp_path / "linked"
    src.mkdir()
    (src / "leak").symlink_to(secret)
    (src / "dir").symlink_to(outside)
    (src / "up").symlink_to("../../../../../../../..")
    rel = os.path.relpath(outside / "victim.txt", src)  # noqa: ASYNC240
    command = (
        f"cat leak; cat up{secret}; echo pwned > dir/victim.txt; echo pwned > {rel}; "
        "echo pwned > up/tmp/x; ls up/"
    )
    async with BubblewrapSandbox(src, limits=LIMITS, uid=SANDBOX_UID) as box:
        boxed = await sh(box, command)
    assert token not in boxed.stdout
    assert (outside / "victim.txt").read_text() == "intact\n"
    async with HostExecution(src, limits=LIMITS) as control_box:
        control = await sh(control_box, "cat leak")
    assert token in control.stdout


async def test_work_copy_is_a_copy(sandbox: BubblewrapSandbox, tree: Path):
    result = await sh(sandbox, "echo changed > file.txt; rm other.txt; mkdir new; ls")
    assert result.exit_code == 0
    assert (tree / "file.txt").read_text() == "original\n"
    assert (tree / "other.txt").exists() and not (tree / "new").exists()
    work = sandbox.work.path
    assert (work / "file.txt").read_text() == "changed\n" and not (work / "other.txt").exists()
    await sandbox.aclose()
    assert not work.exists()


async def test_host_environment_does_not_leak(
    sandbox: BubblewrapSandbox, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("TETHER_TEST_API_KEY", "sk-very-secret")
    result = await sh(sandbox, "env; cat /proc/1/environ")
    assert "sk-very-secret" not in result.stdout + result.stderr


async def test_identity_has_no_privilege(sandbox: BubblewrapSandbox):
    result = await sh(sandbox, "id -u; grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status")
    lines = result.stdout.split()
    assert lines[0] == "65534"
    assert "CapEff:" in lines and lines[lines.index("CapEff:") + 1] == "0000000000000000"
    assert lines[lines.index("CapBnd:") + 1] == "0000000000000000"
    assert lines[lines.index("NoNewPrivs:") + 1] == "1"


async def test_host_processes_are_invisible(sandbox: BubblewrapSandbox):
    result = await sh(
        sandbox, f"ls /proc | grep -c '^[0-9]'; test -e /proc/{os.getpid()} && echo seen"
    )
    assert int(result.stdout.split()[0]) < 10 and "seen" not in result.stdout


async def test_no_nested_user_namespace(sandbox: BubblewrapSandbox):
    result = await sh(sandbox, "unshare --user --map-root-user id -u || echo refused")
    assert "refused" in result.stdout


# --- resources -----------------------------------------------------------------------------


async def test_fork_bomb_is_bounded_and_ends(tree: Path):
    limits = SandboxLimits(timeout_seconds=4, max_processes=48)
    peak = 0
    async with BubblewrapSandbox(tree, limits=limits, uid=SANDBOX_UID, prepare=False) as box:
        before = sandbox_pids()  # the holder
        task = asyncio.ensure_future(sh(box, ":(){ :|:& };:"))
        while not task.done():
            peak = max(peak, len(sandbox_pids() - before))
            probe = await asyncio.create_subprocess_exec("true")  # the host still forks
            assert await probe.wait() == 0
            await asyncio.sleep(0.05)
        result = await task
    assert result.duration_seconds < limits.timeout_seconds + 3
    assert peak <= limits.max_processes + 3  # the two bwrap processes and a spare
    await asyncio.sleep(0.2)
    assert sandbox_pids() - before == set()


async def test_memory_bomb_hits_the_address_space_limit(sandbox: BubblewrapSandbox):
    result = await sh(sandbox, 'perl -e \'$x = "a" x (2 * 1024**3); print "allocated\\n"\'')
    assert result.exit_code != 0
    assert "allocated" not in result.stdout
    assert "Out of memory" in result.stderr


async def test_cpu_loop_is_killed_at_the_timeout(sandbox: BubblewrapSandbox):
    marker = f"tether-spin-{uuid.uuid4().hex}"
    started = time.monotonic()
    result = await sh(sandbox, f"echo start; while :; do : {marker}; done", timeout=1.0)
    assert result.timed_out and result.exit_code != 0
    assert result.stdout.startswith("start")
    assert time.monotonic() - started < 3
    assert "wall timeout" in result.to_text()
    assert live_with(marker) == set()


async def test_cancellation_kills_everything(sandbox: BubblewrapSandbox):
    marker = "60.0" + uuid.uuid4().hex[:6].translate(str.maketrans("abcdef", "123456"))
    task = asyncio.ensure_future(sh(sandbox, f"sleep {marker} & sleep {marker} & wait"))
    for _ in range(100):
        if len(live_with(f"sleep {marker}")) >= 3:  # the two sleeps and their shell
            break
        await asyncio.sleep(0.05)
    assert len(live_with(f"sleep {marker}")) >= 3
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert live_with(marker) == set()


async def test_setsid_grandchild_does_not_outlive_the_command(
    sandbox: BubblewrapSandbox, host: HostExecution
):
    marker = f"tether-late-{uuid.uuid4().hex}"
    late = (
        f"setsid bash -c 'sleep 1; echo escaped > late.txt # {marker}' </dev/null >/dev/null 2>&1 &"
        " sleep 0.3; echo started"
    )
    boxed = await sh(sandbox, late)
    assert live_with(marker) == set()
    control = await sh(host, late)
    assert "started" in boxed.stdout and "started" in control.stdout
    await asyncio.sleep(2)
    assert not (sandbox.work.path / "late.txt").exists()
    assert (host.work.path / "late.txt").read_text() == "escaped\n"  # the control escaped


async def test_output_flood_is_capped_with_bounded_memory(sandbox: BubblewrapSandbox):
    tracemalloc.start()
    try:
        result = await sh(sandbox, "head -c 20000000 /dev/zero | tr '\\0' a; echo err >&2")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.stdout == "a" * 4000 + "\n[19996000 bytes omitted]"
    assert result.stdout_omitted == 19_996_000 and result.stderr == "err\n"
    assert peak < 2_000_000


async def test_endless_output_is_capped_and_killed(sandbox: BubblewrapSandbox):
    result = await sh(sandbox, "yes", timeout=1.0)
    assert result.timed_out
    assert len(result.stdout) < 4100 and result.stdout.endswith("bytes omitted]")
    assert result.stdout_omitted > 1_000_000
