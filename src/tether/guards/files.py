"""File tools confined to one folder: read a file, list a folder, search text.

Names are relative to the folder. ``..``, absolute paths and NUL bytes are refused before
anything is opened; then every component is opened with ``O_NOFOLLOW`` relative to its
parent's descriptor, and symbolic links are resolved by hand, one component at a time, so
a link (or a link swapped in while the tool runs) can never lead out of the folder: a link
that climbs above the folder or has an absolute target is refused. Devices, FIFOs and
sockets are never opened for reading. Every output is capped and says what it left out.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

from pydantic import Field

from tether.errors import ToolFailure
from tether.tools import FunctionTool

_MAX_LINKS = 40
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NAME_DOC = "A name relative to the folder, like src/app.py; no '..', no leading '/'."
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class ConfinedFolder:
    """Read-only access to the files under ``root`` and nothing else."""

    def __init__(
        self,
        root: Path | str,
        *,
        max_chars: int = 4000,
        max_entries: int = 200,
        max_matches: int = 50,
        max_file_bytes: int = 5_000_000,
    ) -> None:
        self.root = Path(root)
        self.max_chars = max_chars
        self.max_entries = max_entries
        self.max_matches = max_matches
        self.max_file_bytes = max_file_bytes

    # --- resolution -----------------------------------------------------------------------

    @contextmanager
    def _open(self, name: str, *, want: str) -> Iterator[int]:
        """A descriptor of ``name`` opened for reading (``want``: "file" or "dir")."""
        parts = _check_name(name)
        chain = [os.open(self.root, _DIR_FLAGS)]
        try:
            file_name = _walk(chain, deque(parts), name)
            if file_name is None:
                if want != "dir":
                    raise ToolFailure(f"{name!r} is a folder: list it instead of reading it.")
                yield chain[-1]
                return
            if want != "file":
                raise ToolFailure(f"{name!r} is a file, not a folder.")
            try:
                fd = os.open(file_name, _READ_FLAGS, dir_fd=chain[-1])
            except OSError:
                raise ToolFailure(f"{name!r} changed while it was opened; try again.") from None
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise ToolFailure(f"{name!r} is not a regular file; it cannot be read.")
                yield fd
            finally:
                os.close(fd)
        finally:
            for d in chain:
                os.close(d)

    # --- the three operations --------------------------------------------------------------

    def read(self, name: str, start_line: int = 1) -> str:
        """Lines of a text file from ``start_line``, up to the character cap."""
        if start_line < 1:
            raise ToolFailure("start_line counts from 1.")
        with self._open(name, want="file") as fd:
            size = os.fstat(fd).st_size
            data = _read_at_most(fd, self.max_file_bytes)
        if b"\0" in data[:8192]:
            raise ToolFailure(f"{name!r} is a binary file ({size} bytes); it cannot be shown.")
        lines = data.decode("utf-8", errors="replace").splitlines(keepends=True)
        if start_line > max(len(lines), 1):
            raise ToolFailure(f"{name!r} has {len(lines)} lines; start_line is past the end.")
        out: list[str] = []
        used = 0
        index = start_line - 1
        while index < len(lines) and used + len(lines[index]) <= self.max_chars:
            out.append(lines[index])
            used += len(lines[index])
            index += 1
        if index == start_line - 1 and index < len(lines):  # one line longer than the cap
            out.append(lines[index][: self.max_chars] + "\n")
            index += 1
        text = "".join(out)
        notes = []
        if index < len(lines):
            notes.append(
                f"lines {start_line}-{index} of {len(lines)} shown; "
                f"call again with start_line={index + 1} for the rest"
            )
        if size > self.max_file_bytes:
            notes.append(f"only the first {self.max_file_bytes} of {size} bytes were read")
        return text + "".join(f"\n[{n}]" for n in notes)

    def list(self, name: str = ".") -> str:
        """The entries of one folder: folders end with '/', links with '@'."""
        with self._open(name, want="dir") as fd:
            entries = []
            with os.scandir(fd) as it:
                for entry in it:
                    if entry.is_symlink():
                        entries.append(f"{entry.name}@")
                    elif entry.is_dir(follow_symlinks=False):
                        entries.append(f"{entry.name}/")
                    else:
                        size = entry.stat(follow_symlinks=False).st_size
                        entries.append(f"{entry.name}  ({size} bytes)")
        entries.sort()
        shown = entries[: self.max_entries]
        text = "\n".join(shown) if shown else "(empty folder)"
        if len(entries) > len(shown):
            text += (
                f"\n[{len(entries) - len(shown)} more entries omitted; list a subfolder "
                "or search by name]"
            )
        return _cap(text, self.max_chars)

    def search(self, text: str, name: str = ".") -> str:
        """Lines containing ``text`` (case-insensitive) in the text files under ``name``."""
        if not text or "\0" in text:
            raise ToolFailure("the search text must be non-empty and without NUL bytes.")
        needle = text.casefold()
        hits: list[str] = []
        total = 0
        base = name.strip("/") or "."
        with self._open(name, want="dir") as fd:
            for folder, dirs, files, dir_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
                dirs.sort()
                for file in sorted(files):
                    path = os.path.normpath(os.path.join(base, folder, file))
                    for number, line in _matching_lines(file, dir_fd, needle, self.max_file_bytes):
                        total += 1
                        if len(hits) < self.max_matches:
                            hits.append(f"{path}:{number}: {line.strip()[:200]}")
        if not hits:
            return f"no line contains {text!r}"
        out = "\n".join(hits)
        if total > len(hits):
            out += (
                f"\n[{total - len(hits)} more matching lines omitted; "
                "search a subfolder or a longer text]"
            )
        return _cap(out, self.max_chars)


def _walk(chain: list[int], todo: deque[str], name: str) -> str | None:
    """Resolve ``todo`` from ``chain[-1]``, one component at a time, never following a link
    implicitly. Folders are pushed on ``chain``; return the last component's name when it
    is a file (in folder ``chain[-1]``), or None when the target is ``chain[-1]`` itself."""
    links = 0
    while todo:
        comp = todo.popleft()
        if comp in ("", "."):
            continue
        if comp == "..":  # only from a link's target: names themselves cannot hold '..'
            if len(chain) == 1:
                raise ToolFailure(f"{name!r} is a link that leads outside the folder.")
            os.close(chain.pop())
            continue
        try:
            chain.append(os.open(comp, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=chain[-1]))
            continue
        except FileNotFoundError:
            raise ToolFailure(f"{name!r} does not exist; list the folder to see names.") from None
        except OSError:
            pass  # not a folder (a file, a link): look at what it is
        try:
            info = os.stat(comp, dir_fd=chain[-1], follow_symlinks=False)
        except FileNotFoundError:
            raise ToolFailure(f"{name!r} does not exist; list the folder to see names.") from None
        if stat.S_ISLNK(info.st_mode):
            links += 1
            try:
                target = os.readlink(comp, dir_fd=chain[-1])
            except OSError:
                raise ToolFailure(f"{name!r} changed while it was opened; try again.") from None
            if links > _MAX_LINKS or target.startswith("/"):
                raise ToolFailure(f"{name!r} is a link that leads outside the folder.")
            todo.extendleft(reversed(target.split("/")))
            continue
        if any(rest not in ("", ".") for rest in todo):
            raise ToolFailure(f"{name!r} does not exist: a part of it is not a folder.")
        if not stat.S_ISREG(info.st_mode):
            raise ToolFailure(f"{name!r} is not a regular file; it cannot be read.")
        return comp
    return None


def _check_name(name: str) -> list[str]:
    if "\0" in name:
        raise ToolFailure("names cannot contain NUL bytes.")
    if len(name) > 4096:
        raise ToolFailure("the name is too long.")
    if name.startswith(("/", "\\", "~")) or (len(name) > 1 and name[1] == ":"):
        raise ToolFailure(f"{name!r} is refused: give a name relative to the folder.")
    parts = name.replace("\\", "/").split("/")
    if ".." in parts:
        raise ToolFailure(f"{name!r} is refused: '..' cannot be used, names stay in the folder.")
    return parts


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit and (chunk := os.read(fd, min(1 << 16, limit - size))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _matching_lines(file: str, dir_fd: int, needle: str, limit: int) -> Iterator[tuple[int, str]]:
    try:
        fd = os.open(file, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        data = _read_at_most(fd, limit)
    finally:
        os.close(fd)
    if b"\0" in data[:8192]:
        return
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if needle in line.casefold():
            yield number, line


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[{len(text) - limit} characters omitted]"


def file_tools(folder: ConfinedFolder | Path | str) -> list[FunctionTool]:
    """``read_file``, ``list_files`` and ``search_files`` over one folder."""
    box = folder if isinstance(folder, ConfinedFolder) else ConfinedFolder(folder)

    def read_file(
        name: Annotated[str, Field(description=_NAME_DOC, min_length=1, max_length=4096)],
        start_line: Annotated[
            int, Field(description="First line to return, from 1; to page on.", ge=1)
        ] = 1,
    ) -> str:
        return box.read(name, start_line)

    def list_files(
        folder: Annotated[
            str, Field(description="A folder relative to the root; '.' is the root.")
        ] = ".",
    ) -> str:
        return box.list(folder)

    def search_files(
        text: Annotated[str, Field(description="Literal text to find, case-insensitive.")],
        folder: Annotated[str, Field(description="Where to search; '.' is everything.")] = ".",
    ) -> str:
        return box.search(text, folder)

    return [
        FunctionTool(
            read_file,
            description=(
                "Reads a text file of the project folder, line by line. "
                f"At most {box.max_chars} characters come back; the notice at the end gives "
                "the start_line to page on. "
                "It cannot read outside the folder, follow links out of it or read binary files."
            ),
        ),
        FunctionTool(
            list_files,
            description=(
                "Lists one folder of the project: subfolders end with '/', links with '@', "
                "files show their size. "
                "Use it to find names before reading. "
                f"It does not recurse and shows at most {box.max_entries} entries."
            ),
        ),
        FunctionTool(
            search_files,
            description=(
                "Finds the lines containing a literal text in the project's text files, "
                "as path:line: text. "
                "Use it to locate code before reading around it. "
                f"It returns at most {box.max_matches} lines, skips binary files and never "
                "follows links."
            ),
        ),
    ]
