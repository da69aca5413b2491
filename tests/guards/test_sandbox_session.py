"""The bubblewrap session around the commands: closing it while commands are on their
way, a command that locks the work folder, a session that can no longer make sandboxes,
kernel memory outside the size caps, bursts served by prepared sandboxes, one exit code
for a timeout. Run for real (root, bubblewrap and libseccomp installed)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from tether.errors import ConfigError
from tether.guards.sandbox import (
    BubblewrapSandbox,
    ExecResult,
    SandboxLimits,
    SandboxUnavailable,
    _session,
)
from tether.guards.sandbox.base import TIMEOUT_EXIT_CODE

LIMITS = SandboxLimits(timeout_seconds=30, memory_bytes=512 << 20, max_processes=64)
BASE_UID = 300_000 + os.getpid() % 100_000 * 8
"""Host uids of their own for this run: what runs as them is ours alone to count."""


def live_pids(uid: int) -> set[int]:
    """Processes of ``uid`` that are not zombies."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
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


# --- closing: nothing starts once aclose() has returned ------------------------------------


@pytest.mark.parametrize("prepare", [False, True])
async def test_no_command_runs_after_aclose_returned(tmp_path: Path, prepare: bool) -> None:
    """A sandbox being made when aclose() ran used to be untracked: its command started
    after aclose() returned and ran to its end."""
    uid = BASE_UID + int(prepare)
    for delay in (0.0, 0.002, 0.01, 0.03, 0.05):
        box = BubblewrapSandbox(tmp_path, limits=LIMITS, uid=uid, prepare=prepare)
        await box.open()
        # two parallel calls: the second one's sandbox is made on its call path
        calls = [
            asyncio.ensure_future(box.run(["bash", "-c", "echo started; sleep 3; echo done"]))
            for _ in range(2)
        ]
        await asyncio.sleep(delay)
        await box.aclose()
        assert live_pids(uid) == set(), f"a process outlived aclose() (closed after {delay} s)"
        for outcome in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(outcome, ExecResult):
                assert "done" not in outcome.stdout  # killed by the close
            else:
                assert isinstance(outcome, SandboxUnavailable), outcome
                assert "closed before the command started" in str(outcome)


async def test_a_closed_sandbox_opens_again_for_a_new_command(tmp_path: Path) -> None:
    box = BubblewrapSandbox(tmp_path, limits=LIMITS, uid=BASE_UID + 2)
    assert (await box.run(["true"])).exit_code == 0
    await box.aclose()
    assert (await box.run(["echo", "again"])).stdout == "again\n"
    await box.aclose()
    assert live_pids(BASE_UID + 2) == set()


# --- a command cannot brick the session -----------------------------------------------------


async def test_locking_the_work_folder_does_not_brick_the_session(tmp_path: Path) -> None:
    """After ``chmod 000 /work`` every call failed with "bubblewrap could not create the
    sandbox", and the model could not undo it."""
    (tmp_path / "kept.txt").write_text("kept\n")
    async with BubblewrapSandbox(tmp_path, limits=LIMITS, uid=BASE_UID + 3, pool_size=1) as box:
        assert (await box.run(["chmod", "000", "/work"])).exit_code == 0
        for _ in range(3):  # sandboxes made after the lock, not only those made before
            locked = await box.run(["bash", "-c", "pwd; cat /work/kept.txt"])
            assert locked.exit_code in (0, 1)  # it ran (in /work if it was entered first)
        undo = await box.run(["chmod", "755", "/work"])
        assert undo.exit_code == 0
        later = await box.run(["bash", "-c", "pwd; cat kept.txt"])
        assert later.stdout == "/work\nkept\n", later


async def test_a_locked_work_folder_is_explained(tmp_path: Path) -> None:
    async with BubblewrapSandbox(tmp_path, limits=LIMITS, uid=BASE_UID + 3, prepare=False) as box:
        await box.run(["chmod", "000", "/work"])
        result = await box.run(["pwd"])
        assert result.stdout == "/\n"
        assert "cannot enter the work folder /work" in result.stderr
        assert "chmod 755 /work" in result.stderr


async def test_an_unusable_session_is_recreated_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "source.txt").write_text("from the source\n")
    box = BubblewrapSandbox(tmp_path, limits=LIMITS, uid=BASE_UID + 4, prepare=False)
    await box.run(["bash", "-c", "echo changed > source.txt"])
    broken = {box.work.holder_pid}
    real = BubblewrapSandbox.sandbox_argv

    def sandbox_argv(self: BubblewrapSandbox, **fds: int | None) -> list[str]:
        args = real(self, **fds)  # type: ignore[arg-type]
        if self.work.holder_pid in broken:  # this session can no longer make a sandbox
            args += ["--bind", "/nonexistent-folder", "/x"]
        return args

    monkeypatch.setattr(BubblewrapSandbox, "sandbox_argv", sandbox_argv)
    with pytest.raises(SandboxUnavailable) as failed:
        await box.run(["echo", "hi"])
    message = str(failed.value)
    assert "the command did not run" in message and "re-created from the source" in message
    assert "/nonexistent-folder" in message  # bwrap's own words say what went wrong
    after = await box.run(["cat", "source.txt"])
    assert after.stdout == "from the source\n"
    await box.aclose()


# --- kernel memory: inodes and extended attributes are capped -------------------------------

KERNEL_MEMORY = r"""
import json, os
def slab():
    info = dict(line.split(":", 1) for line in open("/proc/meminfo"))
    return {k: int(info[k].split()[0]) * 1024 for k in ("Slab", "SUnreclaim")}
before = slab()
made, xattrs = {}, 0
for where in ("/work", "/tmp"):
    made[where] = 0
    for i in range(60000):
        try:
            os.close(os.open(f"{where}/f{i}", os.O_CREAT | os.O_WRONLY))
        except OSError:
            break
        made[where] += 1
        try:
            os.setxattr(f"{where}/f{i}", "user.pad", b"x" * 2000)
            xattrs += 1
        except OSError:
            pass
after = slab()
print(json.dumps({"made": made, "xattrs": xattrs,
                  "growth": {k: after[k] - before[k] for k in before}}))
"""


@pytest.mark.parametrize("xattrs", [False, True])
async def test_kernel_memory_stays_under_the_documented_bound(tmp_path: Path, xattrs: bool) -> None:
    """100,000 empty files plus user xattrs cost ~222 MiB of kernel memory while ``df``
    showed 4 KiB: tmpfs ``size=`` caps data only."""
    limits = SandboxLimits(timeout_seconds=120, work_inodes=6000, scratch_inodes=2000)
    box = BubblewrapSandbox(tmp_path, limits=limits, uid=BASE_UID + 5, xattrs=xattrs)
    async with box:
        result = await box.run(["python3", "-c", KERNEL_MEMORY])
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["made"]["/work"] < limits.work_inodes  # refused at the cap (the root counts)
    assert report["made"]["/tmp"] < limits.scratch_inodes
    if xattrs:  # allowed: charged to the same inode budget
        assert report["xattrs"] > 0
    else:
        assert report["xattrs"] == 0  # refused: no tool asked for them
    bound = limits.kernel_memory_bytes(commands=1)
    assert bound == (6000 + 2000) * 2048  # the bound docs/sandbox.md states
    assert report["growth"]["Slab"] < bound, report


async def test_a_tree_with_more_files_than_the_cap_is_refused_clearly(tmp_path: Path) -> None:
    for i in range(60):
        (tmp_path / f"f{i}").write_text("x")
    box = BubblewrapSandbox(tmp_path, limits=SandboxLimits(work_inodes=50), uid=BASE_UID + 5)
    with pytest.raises(ConfigError, match="work_inodes = 50 files and folders"):
        await box.open()
    await box.aclose()


# --- a burst of calls finds its sandboxes ready ---------------------------------------------


async def test_a_burst_of_parallel_calls_pays_no_preparation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: dict[int, float] = {}
    used: list[int] = []
    real_start, real_send = _session.CommandSandbox.start, _session.CommandSandbox.send

    async def start(*args: object) -> _session.CommandSandbox:
        sandbox = await real_start(*args)  # type: ignore[arg-type]
        started[id(sandbox)] = time.monotonic()
        return sandbox

    async def send(self: _session.CommandSandbox, argv: list[str]) -> bool:
        used.append(id(self))
        return await real_send(self, argv)

    monkeypatch.setattr(_session.CommandSandbox, "start", start)
    monkeypatch.setattr(_session.CommandSandbox, "send", send)
    async with BubblewrapSandbox(tmp_path, limits=LIMITS, uid=BASE_UID + 6) as box:
        await box.prepared()  # the pool fills in the background
        burst = time.monotonic()
        results = await asyncio.gather(*(box.run(["echo", str(i)]) for i in range(4)))
        assert [r.stdout for r in results] == ["0\n", "1\n", "2\n", "3\n"]
        assert len(used) == 4 and all(started[i] < burst for i in used)


# --- one exit code for a timeout ------------------------------------------------------------


async def test_a_timeout_always_reports_the_same_exit_code(tmp_path: Path) -> None:
    """It was 137 or -9 depending on which process reported the kill first."""
    async with BubblewrapSandbox(tmp_path, limits=LIMITS, uid=BASE_UID + 7) as box:
        results = [
            await box.run(["bash", "-c", "sleep 5; true"], timeout=0.3),
            await box.run(["sleep", "5"], timeout=0.3),
            await box.run(["bash", "-c", "trap '' TERM; sleep 5 & wait"], timeout=0.3),
        ]
    assert [(r.exit_code, r.timed_out) for r in results] == [(TIMEOUT_EXIT_CODE, True)] * 3
    assert TIMEOUT_EXIT_CODE == -9
