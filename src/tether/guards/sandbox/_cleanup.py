"""Delete a folder tree that a sandboxed command wrote, without ever leaving it.

The tree is hostile: it may hold links to host folders, folders the command made
unreadable or unwritable, or a chain of folders thousands of levels deep. So:

- every entry is opened relative to its parent's descriptor with ``O_NOFOLLOW``: a link is
  unlinked, never followed, and nothing outside the tree is ever opened or changed;
- the walk keeps its own stack of names (no recursion: depth costs memory, not Python
  frames) and holds at most two folder descriptors at a time; going back up opens ``..``
  and checks that it is the folder it came from;
- a folder is given back its owner's rights (``0700``) through its own descriptor before
  it is read, so a ``chmod 000`` cannot make it undeletable for a non-root owner.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OWNER_RWX = stat.S_IRWXU


@dataclass(slots=True)
class _Level:
    name: str
    """Its name in the folder above."""
    dev: int
    ino: int
    subfolders: list[str] = field(default_factory=list)
    """Subfolders still to remove (files are unlinked as soon as the folder is read)."""


def remove_tree(path: Path) -> None:
    """Delete ``path`` and everything under it; a link at ``path`` itself is unlinked.

    Raises :class:`OSError` naming how many entries could not be removed, after removing
    everything else.
    """
    parent_fd = os.open(path.parent, _DIR_FLAGS & ~os.O_NOFOLLOW)
    try:
        errors: list[OSError] = []
        _remove(parent_fd, path.name, errors)
    finally:
        os.close(parent_fd)
    if errors:
        raise OSError(
            f"{len(errors)} entries under {path} could not be removed (first: {errors[0]})"
        )


def _remove(parent_fd: int, name: str, errors: list[OSError]) -> None:
    fd = _open_folder(parent_fd, name)
    if fd is None:
        _unlink(parent_fd, name, errors)
        return
    levels = [_read_level(fd, name, errors)]
    while levels:
        level = levels[-1]
        if level.subfolders:
            child = level.subfolders.pop()
            try:
                child_fd = _open_folder(fd, child)
            except OSError as exc:
                errors.append(exc)
                continue
            if child_fd is None:  # not a folder (any more): a file or a link
                _unlink(fd, child, errors)
                continue
            os.close(fd)
            fd = child_fd
            levels.append(_read_level(fd, child, errors))
            continue
        levels.pop()
        if not levels:
            os.close(fd)
            _rmdir(parent_fd, name, errors)
            return
        up = os.open("..", _DIR_FLAGS, dir_fd=fd)
        os.close(fd)
        fd = up
        above = os.fstat(fd)
        if (above.st_dev, above.st_ino) != (levels[-1].dev, levels[-1].ino):
            os.close(fd)
            raise OSError(f"a folder of the tree was moved while it was being removed: {name}")
        _rmdir(fd, level.name, errors)


def _open_folder(dir_fd: int, name: str) -> int | None:
    """A descriptor of the folder ``name`` (never through a link), or None when ``name``
    is not a folder. A folder its owner locked (``chmod 000``) is opened up first."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            return None  # a link, a file, or gone: unlinked (or skipped) by the caller
        if exc.errno != errno.EACCES:
            raise
        fd = _reopen_locked(dir_fd, name)
    try:
        mode = os.fstat(fd).st_mode
        if mode & _OWNER_RWX != _OWNER_RWX:
            os.fchmod(fd, stat.S_IMODE(mode) | _OWNER_RWX)  # this very folder, by descriptor
    except PermissionError:
        pass  # not ours (we are not root): unlinking in it may fail, and is then reported
    return fd


def _reopen_locked(dir_fd: int, name: str) -> int:
    """Open a folder without read permission: pin it with ``O_PATH`` (which needs none),
    give its owner rights back through that pin, then open it through the pin."""
    pin = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        pinned = f"/proc/self/fd/{pin}"
        os.chmod(pinned, _OWNER_RWX)
        return os.open(pinned, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    finally:
        os.close(pin)


def _read_level(fd: int, name: str, errors: list[OSError]) -> _Level:
    """Unlink the folder's files and links; return it with its subfolders to visit."""
    st = os.fstat(fd)
    level = _Level(name, st.st_dev, st.st_ino)
    with os.scandir(fd) as entries:
        listed = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    for entry_name, is_folder in listed:
        if is_folder:
            level.subfolders.append(entry_name)
        else:
            _unlink(fd, entry_name, errors)
    return level


def _unlink(dir_fd: int, name: str, errors: list[OSError]) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:  # swapped for a folder meanwhile: remove that folder too
        _remove(dir_fd, name, errors)
    except OSError as exc:
        errors.append(exc)


def _rmdir(dir_fd: int, name: str, errors: list[OSError]) -> None:
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        errors.append(exc)
