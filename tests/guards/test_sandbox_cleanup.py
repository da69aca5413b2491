"""Host-side cleanup of a work copy a hostile command wrote: it never follows a link out,
never recurses on the Python stack, and leaves nothing behind. Each trick is planted for
real, by a command in the bubblewrap sandbox and on the host, and by hand."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.guards.sandbox import BubblewrapSandbox, HostExecution, SandboxLimits, WorkCopy

DEPTH = 1500
LIMITS = SandboxLimits(timeout_seconds=60)
SANDBOX_UID = 200_000 + os.getpid() % 100_000


def plant(outside: Path) -> str:
    """A command that plants every trick in its current folder: a 1,500-level deep chain
    ending in a link to a host folder, links to that folder at the top, a folder locked
    with ``chmod 000`` (with content) and a read-only one."""
    return (
        f"set -e; ln -s {outside} top-link; ln -s {outside}/keep.txt file-link; "
        "mkdir -p locked/inner ro; echo x > locked/inner/f; echo x > ro/f; "
        "chmod 000 locked; chmod 500 ro; "
        f'deep=$(printf "d/%.0s" $(seq {DEPTH})); mkdir -p "$deep/deep-locked"; '
        f'ln -s {outside} "$deep/deep-link"; chmod 000 "$deep/deep-locked"; echo planted'
    )


@pytest.fixture
def outside() -> Iterator[Path]:
    """A host folder the tricks point at: it must keep its mode and its content."""
    folder = Path(tempfile.mkdtemp(prefix="tether-outside-"))
    folder.chmod(0o755)
    (folder / "keep.txt").write_text("keep\n")
    yield folder
    shutil.rmtree(folder)


def assert_untouched(outside: Path) -> None:
    assert stat.S_IMODE(outside.stat().st_mode) == 0o755
    assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
    assert (outside / "keep.txt").read_text() == "keep\n"


def leftovers() -> set[str]:
    """Work copies on the host owned by this run's sandbox user (other runs share /tmp)."""
    found = set()
    for path in Path(tempfile.gettempdir()).glob("tether-sandbox-*"):
        try:
            if path.lstat().st_uid == SANDBOX_UID:
                found.add(path.name)
        except FileNotFoundError:
            continue
    return found


async def test_bubblewrap_session_plants_tricks_and_leaves_nothing(outside: Path) -> None:
    before = leftovers()
    box = BubblewrapSandbox(limits=LIMITS, uid=SANDBOX_UID)
    async with box:
        result = await box.run(["bash", "-c", plant(outside)])
        assert "planted" in result.stdout, result.stderr
        work = box.work.path
    assert not work.exists()
    assert leftovers() == before
    assert_untouched(outside)


async def test_host_execution_plants_tricks_and_cleanup_stays_in_the_copy(
    outside: Path,
) -> None:
    box = HostExecution(limits=LIMITS)
    work = await box.open()
    result = await box.run(["bash", "-c", plant(outside)])
    assert "planted" in result.stdout, result.stderr
    await box.aclose()
    assert not work.exists() and not work.parent.exists()
    assert_untouched(outside)


def test_deep_tree_is_removed_without_recursion(tmp_path: Path) -> None:
    copy = WorkCopy(None)
    work = copy.create()
    fd = os.open(work, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3 * DEPTH):  # deeper than any recursion limit
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.symlink(str(tmp_path), "up", dir_fd=fd)
    os.close(fd)
    root = work.parent
    copy.remove()
    assert not root.exists() and tmp_path.exists()


def test_a_link_swapped_for_the_copy_root_is_unlinked_not_followed(
    tmp_path: Path, outside: Path
) -> None:
    copy = WorkCopy(None)
    work = copy.create()
    shutil.rmtree(work)
    work.symlink_to(outside)  # the command replaced its own folder with a link
    copy.remove()
    assert_untouched(outside)


def test_a_non_root_owner_cleans_locked_folders_without_touching_linked_ones(
    outside: Path,
) -> None:
    """As a plain user: ``chmod 000`` folders must be opened up through their own
    descriptor, and a link to the owner's folder must not have its target chmod-ed."""
    copy = WorkCopy(None, owner=(SANDBOX_UID, SANDBOX_UID))
    work = copy.create()
    os.chown(outside, SANDBOX_UID, SANDBOX_UID)  # the user's own folder, e.g. ~/.ssh
    (work / "link").symlink_to(outside)
    (work / "locked" / "inner").mkdir(parents=True)
    (work / "locked" / "inner" / "f").write_text("x")
    (work / "ro").mkdir()
    (work / "ro" / "f").write_text("x")
    for path in [work / "link", *work.rglob("*")]:
        os.lchown(path, SANDBOX_UID, SANDBOX_UID)
    (work / "locked").chmod(0)
    (work / "ro").chmod(0o500)
    root = work.parent
    assert _as_user(SANDBOX_UID, copy.remove) == 0
    assert not root.exists()
    assert_untouched(outside)


def _as_user(uid: int, action: object) -> int:
    """Run ``action`` in a child process that has become ``uid``; its exit status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            action()  # type: ignore[operator]
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_removal_that_fails_says_so() -> None:
    copy = WorkCopy(None)
    work = copy.create()
    (work / "f").write_text("x")
    root = work.parent
    status = _as_user(SANDBOX_UID, copy.remove)  # not the owner: it cannot delete a thing
    assert status == 1 and (work / "f").exists()
    shutil.rmtree(root)
