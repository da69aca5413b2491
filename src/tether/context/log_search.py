"""A log search tool built for an agent: a file name in one folder, a filter, a page.

The naive tool returns a whole file for any path; this one reads only in the folder it is
given, takes a file *name* (never a path), streams the file line by line, returns at most
50 matching lines with their numbers and says how many more there are and how to get them
(``[312 more matches: since=50]``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tether.context.paging import page
from tether.errors import ConfigError, InvalidArguments, ToolFailure
from tether.tools import RunContext, Tool, ToolSpec

__all__ = ["LogSearchTool", "log_search_tool"]

MAX_LINES = 50
MAX_LINE_CHARS = 500
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$"

DESCRIPTION = (
    "Searches one application log file for the lines that contain a text, and returns them "
    "with their line numbers. "
    "It returns at most {limit} matching lines, starting at the match of rank 'since'; "
    "when more remain, the result ends with a notice such as [312 more matches: since=50]: "
    "call again with that 'since' to read the next page. "
    "Use it to find errors, request ids or stack traces instead of reading whole files. "
    "It reads only the files of the log folder, by name; it does not accept paths, "
    "regular expressions or wildcards, and it never modifies a file."
)


def log_search_tool(
    folder: str | os.PathLike[str],
    *,
    name: str = "search_log",
    max_lines: int = MAX_LINES,
) -> LogSearchTool:
    """A tool searching the log files of ``folder`` (see :class:`LogSearchTool`)."""
    return LogSearchTool(folder, name=name, max_lines=max_lines)


class LogSearchTool(Tool):
    """Case-sensitive search of one file of a fixed folder, paged by ``since``.

    The file argument is a name; anything that could leave the folder (separators,
    ``..``, absolute paths, a symlink whose target is outside) is refused with a
    :class:`~tether.errors.ToolFailure` the model can read.
    """

    def __init__(
        self, folder: str | os.PathLike[str], *, name: str = "search_log", max_lines: int = 50
    ) -> None:
        if max_lines < 1:
            raise ValueError("max_lines must be at least 1")
        path = Path(folder)
        if not path.exists():
            raise ConfigError(
                f"the log folder {str(folder)!r} does not exist: pass the folder your "
                "application writes its logs to (log_search_tool reads files by name there)"
            )
        self.folder = path.resolve(strict=True)
        if not self.folder.is_dir():
            raise ConfigError(
                f"{str(folder)!r} is a file, not a folder: pass the folder that holds the logs"
            )
        self.max_lines = max_lines
        self.spec = ToolSpec(
            name,
            DESCRIPTION.format(limit=max_lines),
            {
                "type": "object",
                "properties": {
                    "file": {
                        "type": "string",
                        "pattern": NAME_PATTERN,
                        "description": "Name of a file of the log folder, not a path, "
                        "for example api-2026-09-25.log.",
                    },
                    "pattern": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": 200,
                        "description": "Text to look for, case-sensitive, matched literally "
                        "(not a regular expression), for example ERR or a request id.",
                    },
                    "since": {
                        "type": "integer",
                        "minimum": 0,
                        "default": 0,
                        "description": "Rank of the first match to return, 0 for the first; "
                        "use the value given by the previous result's notice.",
                    },
                },
                "required": ["file", "pattern"],
                "additionalProperties": False,
            },
        )

    async def invoke(self, arguments: Mapping[str, Any], ctx: RunContext[Any]) -> str:
        file, pattern, since = self._arguments(arguments)
        path = self.resolve(file)
        return await asyncio.to_thread(self._search, path, file, pattern, since)

    def resolve(self, file: str) -> Path:
        """The path of ``file`` inside the folder; :class:`ToolFailure` if it is not one."""
        outside = ToolFailure(
            f"{file!r} is not a file of the log folder: give a file name only, "
            "without a path, '..' or a leading '/'."
        )
        if (
            not file
            or file in (".", "..")
            or "/" in file
            or "\\" in file
            or "\x00" in file
            or os.path.isabs(file)
        ):
            raise outside
        candidate = self.folder / file
        try:
            real = candidate.resolve(strict=True)
        except (FileNotFoundError, NotADirectoryError):
            raise ToolFailure(
                f"There is no file named {file!r} in the log folder. "
                f"Available files: {self._listing()}."
            ) from None
        except (OSError, RuntimeError):  # symlink loops and the like
            raise outside from None
        if real.parent != self.folder or not real.is_file():
            raise outside
        return real

    def _arguments(self, arguments: Mapping[str, Any]) -> tuple[str, str, int]:
        problems: list[str] = []
        extra = sorted(set(arguments) - {"file", "pattern", "since"})
        if extra:
            problems.append(f"unknown field(s) {', '.join(extra)}")
        file = arguments.get("file")
        if not isinstance(file, str) or not file:
            problems.append("file: a non-empty file name is required")
        pattern = arguments.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            problems.append("pattern: a non-empty text is required")
        since = arguments.get("since", 0)
        if since is None:
            since = 0
        if isinstance(since, bool) or not isinstance(since, int) or since < 0:
            problems.append("since: must be an integer >= 0")
        if problems:
            raise InvalidArguments(self.spec.name, problems)
        assert isinstance(file, str) and isinstance(pattern, str) and isinstance(since, int)
        return file, pattern, since

    def _search(self, path: Path, file: str, pattern: str, since: int) -> str:
        found = page(
            _matches(path, pattern),
            since=since,
            limit=self.max_lines,
            unit="matches",
            param="since",
        )
        return found.render(empty=f"No line of {file} contains {pattern!r}.")

    def _listing(self, most: int = 20) -> str:
        names = sorted(p.name for p in self.folder.iterdir() if p.is_file())
        if not names:
            return "none"
        more = f" and {len(names) - most} more" if len(names) > most else ""
        return ", ".join(names[:most]) + more


def _matches(path: Path, pattern: str) -> Iterator[str]:
    """``"<line number>: <line>"`` for each line containing ``pattern``, read lazily."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    with open(fd, encoding="utf-8", errors="replace", newline=None) as handle:
        for number, line in enumerate(handle, start=1):
            if pattern in line:
                text = line.rstrip("\r\n")
                if len(text) > MAX_LINE_CHARS:
                    cut = len(text) - MAX_LINE_CHARS
                    text = f"{text[:MAX_LINE_CHARS]} [{cut} characters omitted]"
                yield f"{number}: {text}"
