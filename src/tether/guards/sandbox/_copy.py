"""The work tree as a tar stream, for the sandbox to unpack into its own memory file system.

The walk keeps its own stack (no recursion), never follows a link (links travel as links),
skips FIFOs, sockets and devices, drops names matching the ``ignore`` patterns at every
level (like :func:`shutil.ignore_patterns`), and writes hard links as separate files.
"""

from __future__ import annotations

import fnmatch
import os
import stat
import tarfile
from collections.abc import Sequence
from pathlib import Path

from tether.errors import ConfigError


def write_tree(source: Path | None, ignore: Sequence[str], fd: int) -> None:
    """Write ``source`` (None: nothing) as a tar stream to ``fd``, then close ``fd``."""
    with (
        os.fdopen(fd, "wb", buffering=1 << 16) as raw,
        tarfile.open(fileobj=raw, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        if source is None:
            return
        stack: list[tuple[Path, str]] = [(source, "")]
        while stack:
            folder, prefix = stack.pop()
            names = sorted(os.listdir(folder))
            dropped = {name for pattern in ignore for name in fnmatch.filter(names, pattern)}
            for name in names:
                if name in dropped:
                    continue
                path, arcname = folder / name, prefix + name
                try:
                    if _add(tar, path, arcname):
                        stack.append((path, arcname + "/"))
                except BrokenPipeError:
                    raise  # the sandbox stopped reading: it says why
                except OSError as exc:
                    raise ConfigError(
                        f"could not copy {path} into the sandbox ({exc.strerror}): make it "
                        "readable or add it to ignore"
                    ) from None


def _add(tar: tarfile.TarFile, path: Path, arcname: str) -> bool:
    """Add one entry; return whether it is a folder to walk into."""
    mode = os.lstat(path).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
        return False  # FIFO, socket, device: never opened
    info = tar.gettarinfo(str(path), arcname)
    if info.islnk():  # a second name of a file already sent: send it again, separately
        info.type, info.linkname, info.size = tarfile.REGTYPE, "", os.lstat(path).st_size
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if stat.S_ISREG(mode):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as content:
            tar.addfile(info, content)
        return False
    tar.addfile(info)
    return stat.S_ISDIR(mode)
