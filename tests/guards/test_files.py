"""Confined file tools: names stay inside the folder, outputs are capped."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import pytest

from tether.errors import InvalidArguments, ToolFailure
from tether.guards.files import ConfinedFolder, file_tools
from tether.tools import RunContext, lint


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("TOP-SECRET\n")
    return folder


@pytest.fixture
def root(tmp_path: Path, outside: Path) -> Path:
    root = tmp_path / "project"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "README.md").write_text("hello\nworld\n")
    (root / "src" / "app.py").write_text("import os\n# TODO: fix\nprint('hi')\n")
    (root / "src" / "pkg" / "mod.py").write_text("x = 1  # todo later\n")
    (root / "blob.bin").write_bytes(b"\0\1\2" * 100)
    (root / "inner-link").symlink_to("src/app.py")
    (root / "dir-link").symlink_to("src")
    (root / "abs-link").symlink_to(outside / "secret.txt")
    (root / "rel-link").symlink_to(os.path.relpath(outside / "secret.txt", root))
    (root / "src" / "climb").symlink_to("../../outside")
    (root / "dir-out").symlink_to(outside)
    (root / "loop").symlink_to("loop")
    os.mkfifo(root / "fifo")
    return root


@pytest.fixture
def box(root: Path) -> ConfinedFolder:
    return ConfinedFolder(root)


@pytest.mark.parametrize(
    "name",
    [
        "../outside/secret.txt",
        "src/../../outside/secret.txt",
        "..",
        "/etc/passwd",
        "/root/.bashrc",
        "~/x",
        "src\\..\\..\\outside\\secret.txt",
        "README.md\0.png",
        "abs-link",
        "rel-link",
        "src/climb/secret.txt",
        "dir-out/secret.txt",
        "loop",
        "fifo",
    ],
)
def test_traversal_is_refused(box: ConfinedFolder, name: str) -> None:
    with pytest.raises(ToolFailure) as err:
        box.read(name)
    assert "TOP-SECRET" not in str(err.value)
    assert str(err.value).endswith(".")  # one clear sentence
    assert "/tmp" not in str(err.value)  # no host path in what the model reads


@pytest.mark.parametrize("name", ["..", "/", "dir-out", "src/climb", "/etc"])
def test_listing_outside_is_refused(box: ConfinedFolder, name: str) -> None:
    with pytest.raises(ToolFailure):
        box.list(name)


@pytest.mark.parametrize("name", ["..", "dir-out", "/tmp"])
def test_search_outside_is_refused(box: ConfinedFolder, name: str) -> None:
    with pytest.raises(ToolFailure):
        box.search("secret", name)


def test_search_never_follows_links_out(box: ConfinedFolder) -> None:
    assert box.search("TOP-SECRET") == "no line contains 'TOP-SECRET'"


def test_links_inside_the_folder_work(box: ConfinedFolder) -> None:
    assert box.read("inner-link").startswith("import os")
    assert box.read("dir-link/app.py").startswith("import os")
    assert box.read("./src//pkg/mod.py") == "x = 1  # todo later\n"


def test_read_refuses_binary_and_folders(box: ConfinedFolder) -> None:
    with pytest.raises(ToolFailure, match="binary"):
        box.read("blob.bin")
    with pytest.raises(ToolFailure, match="folder"):
        box.read("src")
    with pytest.raises(ToolFailure, match="does not exist"):
        box.read("nope.txt")
    with pytest.raises(ToolFailure, match="not a folder"):
        box.read("README.md/x")


def test_read_pages_with_a_notice(root: Path) -> None:
    (root / "long.txt").write_text("".join(f"line {i:04}\n" for i in range(1, 1001)))
    box = ConfinedFolder(root, max_chars=100)
    first = box.read("long.txt")
    assert first.startswith("line 0001\n")
    assert "[lines 1-10 of 1000 shown; call again with start_line=11 for the rest]" in first
    assert box.read("long.txt", start_line=11).startswith("line 0011\n")
    last = box.read("long.txt", start_line=995)
    assert last.endswith("line 1000\n") and "[" not in last


def test_huge_file_reads_only_a_prefix(root: Path) -> None:
    (root / "huge.txt").write_text("x\n" * 100_000)
    box = ConfinedFolder(root, max_file_bytes=1000)
    text = box.read("huge.txt")
    assert "only the first 1000 of 200000 bytes were read" in text


def test_list_marks_kinds_and_caps(root: Path, box: ConfinedFolder) -> None:
    listing = box.list(".")
    assert "src/" in listing and "abs-link@" in listing and "README.md  (12 bytes)" in listing
    for i in range(30):
        (root / "src" / f"f{i:02}.txt").write_text("")
    capped = ConfinedFolder(root, max_entries=5).list("src")
    assert capped.count("\n") == 5 and "more entries omitted" in capped


def test_search_finds_and_caps(root: Path, box: ConfinedFolder) -> None:
    found = box.search("todo")
    assert found.splitlines() == [
        "src/app.py:2: # TODO: fix",
        "src/pkg/mod.py:1: x = 1  # todo later",
    ]
    assert box.search("todo", "src/pkg") == "src/pkg/mod.py:1: x = 1  # todo later"
    (root / "many.txt").write_text("needle\n" * 80)
    capped = ConfinedFolder(root, max_matches=10).search("needle")
    assert capped.count("many.txt:") == 10 and "[70 more matching lines omitted" in capped


def test_link_swapped_during_resolution_cannot_escape(root: Path, outside: Path) -> None:
    """A writer flips a name between a folder and a link out while reads run."""
    box = ConfinedFolder(root)
    flip = root / "flip"
    stop = threading.Event()

    def flipper() -> None:
        while not stop.is_set():
            try:
                flip.mkdir()
                (flip / "secret.txt").write_text("inside\n")
                (flip / "secret.txt").unlink()
                flip.rmdir()
                flip.symlink_to(outside)
                flip.unlink()
            except OSError:
                pass

    thread = threading.Thread(target=flipper)
    thread.start()
    try:
        for _ in range(3000):
            with contextlib.suppress(ToolFailure):
                assert "TOP-SECRET" not in box.read("flip/secret.txt")
    finally:
        stop.set()
        thread.join()


async def test_tools_are_well_described_and_refuse(root: Path) -> None:
    tools = {t.name: t for t in file_tools(root)}
    assert set(tools) == {"read_file", "list_files", "search_files"}
    assert [f for f in lint(list(tools.values())) if f.severity == "error"] == []
    ctx: RunContext[None] = RunContext(deps=None)
    assert (await tools["read_file"].invoke({"name": "README.md"}, ctx)) == "hello\nworld\n"
    assert "app.py" in await tools["list_files"].invoke({"folder": "src"}, ctx)
    assert "TODO" in await tools["search_files"].invoke({"text": "todo"}, ctx)
    with pytest.raises(ToolFailure, match="'\\.\\.' cannot be used"):
        await tools["read_file"].invoke({"name": "../outside/secret.txt"}, ctx)
    with pytest.raises(InvalidArguments):
        await tools["read_file"].invoke({"name": "README.md", "start_line": 0}, ctx)
