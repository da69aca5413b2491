"""How a command sandbox enters its holder: one Perl process (or, without Perl, the chain
of utilities) enters the namespaces, mounts a fresh capped scratch space, becomes the
sandbox's user; and the pool makes sandboxes alongside the calls where cores are idle.
Run for real where it says so (root, bubblewrap and libseccomp installed)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tether.guards.sandbox import BubblewrapSandbox, SandboxLimits, _enter, _pool, _session
from tether.guards.sandbox._enter import SCRATCH, enter_argv, scratch_options

LIMITS = SandboxLimits(timeout_seconds=30, memory_bytes=512 << 20, scratch_inodes=777)
BASE_UID = 500_000 + os.getpid() % 100_000 * 4
SCRATCH_CHECK = (
    "id -u; id -G; stat -f -c '%c' /tmp; ls -A /tmp /dev/shm /run; "
    "echo left > /tmp/a; echo left > /dev/shm/b; echo left > /run/c"
)


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as status:
        found = dict(line.rstrip("\n").split(":\t", 1) for line in status if ":\t" in line)
    return {**found, "userns": os.readlink(f"/proc/{pid}/ns/user")}


async def _check_session(tmp_path: Path, uid: int) -> list[dict[str, Any]]:
    """Run the scratch check twice; return how each prepared sandbox's bwrap was started
    (its ids, groups, capabilities) and what ``start`` was given."""
    starts: list[dict[str, Any]] = []
    real_start = _session.start

    async def start(argv: list[str], **kwargs: Any) -> Any:
        running = await real_start(argv, **kwargs)
        starts.append({"argv": argv, "kwargs": kwargs, "status": _status(running.pid)})
        return running

    box = BubblewrapSandbox(tmp_path, limits=LIMITS, uid=uid)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_session, "start", start)
        async with box:
            await box.prepared()
            prepared = list(box._pool._ready)  # type: ignore[union-attr]
            await asyncio.gather(*(s._pid1 for s in prepared))  # each one says it is up
            ready = [_status(s.running.pid) for s in prepared]
            first = await box.run(["bash", "-c", SCRATCH_CHECK])
            second = await box.run(["bash", "-c", SCRATCH_CHECK])
    for result in (first, second):  # a fresh scratch space each time, capped in inodes
        assert result.exit_code == 0, result
        assert result.stdout.split("\n")[:3] == ["65534", "65534", "777"]
        assert "left" not in result.stdout and result.stderr == ""
    host_userns = os.readlink("/proc/self/ns/user")
    for status in ready:  # bwrap, waiting for its argv: the sandbox's user, no group
        assert status["Uid"].split() == [str(uid)] * 4
        assert status["Gid"].split() == [str(uid)] * 4
        assert status["Groups"].strip() == ""
        assert status["userns"] != host_userns  # its capabilities are the holder's alone
    return starts


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: started as another user")
async def test_one_perl_process_enters_the_holder_and_drops_root(tmp_path: Path) -> None:
    assert _enter.perl() is not None  # Debian's perl-base is essential
    starts = await _check_session(tmp_path, BASE_UID)
    sandboxes = [s for s in starts if "--unshare-pid" in s["argv"]]
    assert sandboxes
    for started in sandboxes:  # tether does not fork to change user: Perl does it
        assert started["kwargs"]["user"] is None and started["argv"][0].endswith("perl")
        assert "nsenter" not in started["argv"] and "unshare" not in started["argv"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: started as another user")
async def test_without_perl_the_chain_of_utilities_does_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_enter, "perl", lambda: None)
    starts = await _check_session(tmp_path, BASE_UID + 1)
    sandboxes = [s for s in starts if "--unshare-pid" in s["argv"]]
    assert sandboxes
    for started in sandboxes:
        assert started["kwargs"]["user"] == BASE_UID + 1 and started["argv"][0] == "nsenter"


def test_enter_argv_passes_the_descriptors_and_the_caps() -> None:
    limits = SandboxLimits(tmp_bytes=5 << 20, shm_bytes=6 << 20, scratch_inodes=99)
    options = scratch_options(limits)
    assert options == f"size={(5 << 20) + (6 << 20) + (1 << 20)},nr_inodes=99,mode=0755"
    argv = enter_argv((11, 12), limits, gate_fd=13, run_as=4242)
    if _enter.perl() is not None:
        assert argv[1] == "-e" and argv[3] == "--"
        assert argv[4:] == ["13", "4242", "4242", "11", "12", SCRATCH, options]
    chain = enter_argv((11, 12), limits, gate_fd=13, chain=True)
    assert chain[:3] == ["/bin/bash", "-c", 'read -r _ <&13 && exec "$@"']
    assert "--user=/proc/self/fd/11" in chain and "--mount=/proc/self/fd/12" in chain
    assert options in chain[-2]
    with pytest.raises(ValueError, match="cannot change user"):
        enter_argv((11, 12), limits, run_as=4242, chain=True)


class _Sandbox:
    """A stand-in for a prepared command sandbox."""

    def usable(self) -> bool:
        return True

    async def discard(self) -> None:
        return None

    async def terminate(self) -> None:
        return None


@pytest.mark.parametrize(("idle", "made_at_once"), [(8, 2), (1, 1), (0, 0)])
async def test_the_pool_refills_alongside_the_calls_on_idle_cores(
    monkeypatch: pytest.MonkeyPatch, idle: int, made_at_once: int
) -> None:
    monkeypatch.setattr(_pool, "idle_cores", lambda: idle)
    made = 0

    async def make() -> Any:
        nonlocal made
        made += 1
        await asyncio.sleep(0)
        return _Sandbox()

    pool = _pool.SandboxPool(make, 3)
    await pool.filled()
    assert made == 3
    taken = [await pool.take(), await pool.take()]  # two calls in a row, no pause
    assert len(pool._making) == made_at_once  # being made while the calls run
    for sandbox in taken:
        pool.release(sandbox)  # type: ignore[arg-type]
    await asyncio.sleep(_pool.REFILL_AFTER_S * 3)
    await pool.filled()
    assert len(pool._ready) == 3  # topped up once the calls paused, either way
    await pool.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: started as another user")
async def test_the_argv_arrives_whole_and_leaves_no_descriptor(tmp_path: Path) -> None:
    """The argv travels in a file (bash reads a pipe a byte at a time: a 90 kB command
    took 200 ms to arrive); every byte arrives, and the command inherits only 0, 1, 2."""
    args = ["", "a b", "line1\nline2", "-x", "'\"$HOME`\\", "é☃\t", "x" * 99_000]
    show = "import json, sys; print(json.dumps(sys.argv[1:]) == sys.stdin.read())"
    async with BubblewrapSandbox(tmp_path, limits=LIMITS, uid=BASE_UID + 2) as box:
        same = await box.run(["python3", "-c", show, *args], stdin=json.dumps(args).encode())
        fds = await box.run(["bash", "-c", "ls /proc/$$/fd; true"])  # bash's, not ls's
    assert same.stdout == "True\n", same
    assert fds.stdout.split() == ["0", "1", "2"], fds
