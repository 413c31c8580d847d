"""Folder listings and file lookups under the model roots: nothing outside a root is ever reached."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests._support.tiny_gguf import TINY, TINY_MODEL_PATH, write_tiny_gguf

from mirbad_agent import ModelFolders, relative_parts
from mirbad_agent.exceptions import PathNotFoundError, PathRefusedError, RequestRefusedError
from mirbad_protocol.agent import AgentErrorCode

pytestmark = pytest.mark.skipif(os.name != "posix", reason="builds its fixture tree with POSIX symlinks")

SECRET = "secret.txt"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A model root with folders, a GGUF file and symlinks in and out, beside a folder it must hide."""
    base = tmp_path_factory.mktemp("folders")
    root, outside = base / "root", base / "outside"
    (root / "a" / "sub").mkdir(parents=True)
    (root / "a" / "b.txt").write_text("hello")
    outside.mkdir()
    (outside / SECRET).write_text("do not list me")
    write_tiny_gguf(root / TINY_MODEL_PATH)
    (root / "link-in").symlink_to(root / "a")
    (root / "link-out").symlink_to(outside)
    (root / "file-out").symlink_to(outside / SECRET)
    (root / "dangling").symlink_to(base / "nowhere")
    (root / "a" / "loop").symlink_to(root / "a" / "loop")
    return root, outside


@pytest.fixture
def folders(tree: tuple[Path, Path]) -> ModelFolders:
    return ModelFolders([tree[0]])


@pytest.mark.anyio
async def test_the_root_lists_folders_files_and_inside_links_only(folders: ModelFolders) -> None:
    listing = await folders.list_folder(0, "")
    entries = {entry.name: entry.kind for entry in listing.entries}
    assert entries == {"a": "directory", "link-in": "directory", "tiny": "directory"}
    assert (listing.root, listing.path, listing.truncated) == (0, "", False)


@pytest.mark.anyio
async def test_a_sub_folder_reports_file_sizes(folders: ModelFolders) -> None:
    listing = await folders.list_folder(0, "a/")
    assert [(entry.name, entry.kind, entry.size_bytes) for entry in listing.entries] == [
        ("b.txt", "file", 5),
        ("sub", "directory", None),
    ]
    assert listing.path == "a"
    assert (await folders.list_folder(0, "link-in\\.\\sub")).path == "link-in/sub"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "path",
    [
        "..",
        "a/../..",
        "a/../a",
        "/etc",
        "//server/share",
        "\\\\server\\share",
        "C:\\models",
        "c:models",
        "a\x00b",
    ],
)
async def test_hostile_paths_are_refused_before_any_lookup(folders: ModelFolders, path: str) -> None:
    with pytest.raises(PathRefusedError):
        await folders.list_folder(0, path)


@pytest.mark.anyio
@pytest.mark.parametrize("path", ["link-out", "link-out/", "file-out"])
async def test_symlinks_leading_out_of_the_root_are_refused(folders: ModelFolders, path: str) -> None:
    with pytest.raises(PathRefusedError) as caught:
        await folders.list_folder(0, path)
    assert "leads out" in str(caught.value)


@pytest.mark.anyio
async def test_missing_looping_and_file_paths(folders: ModelFolders) -> None:
    with pytest.raises(PathNotFoundError):
        await folders.list_folder(0, "no/such/folder")
    with pytest.raises(PathNotFoundError):
        await folders.list_folder(0, "a/loop")
    with pytest.raises(RequestRefusedError) as not_a_folder:
        await folders.list_folder(0, "a/b.txt")
    with pytest.raises(RequestRefusedError) as no_root:
        await folders.list_folder(1, "")
    assert (not_a_folder.value.code, not_a_folder.value.field) == (AgentErrorCode.INVALID_REQUEST, "path")
    assert (no_root.value.code, no_root.value.field) == (AgentErrorCode.INVALID_REQUEST, "root")


@pytest.mark.anyio
async def test_a_big_folder_is_truncated(tree: tuple[Path, Path]) -> None:
    listing = await ModelFolders([tree[0]], listing_limit=1).list_folder(0, "a")
    assert len(listing.entries) == 1
    assert listing.truncated


@pytest.mark.anyio
async def test_files_are_found_in_the_first_root_that_has_them(
    tree: tuple[Path, Path], tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.txt").write_text("first")
    folders = ModelFolders([tmp_path, tree[0]])
    assert await folders.find_file("a/b.txt") == (tmp_path / "a" / "b.txt").resolve()
    assert await folders.find_file(TINY_MODEL_PATH) == (tree[0] / TINY_MODEL_PATH).resolve()
    with pytest.raises(PathRefusedError):
        await folders.find_file("file-out")
    with pytest.raises(RequestRefusedError):
        await folders.find_file("a")
    with pytest.raises(RequestRefusedError):
        await folders.find_file("./")
    with pytest.raises(PathNotFoundError):
        await folders.find_file("a/missing.gguf")


@pytest.mark.anyio
async def test_present_finds_files_and_folders_as_a_launch_does(
    tree: tuple[Path, Path], tmp_path: Path
) -> None:
    (tmp_path / "mounted").mkdir()
    folders = ModelFolders([tree[0]], mount=tmp_path)
    paths = [TINY_MODEL_PATH, "a", "link-in/b.txt", "mounted", "a/missing", "link-out", "file-out",
             "dangling", "a/loop", "../root/a", "/etc", "", "."]  # fmt: skip

    found = await folders.present(paths)

    assert [file.path for file in found] == paths
    assert [file.path for file in found if file.present] == [TINY_MODEL_PATH, "a", "link-in/b.txt", "mounted"]
    assert folders.roots == (tree[0],)  # the mount is looked in, never listed


@pytest.mark.anyio
async def test_gguf_info_reads_the_header(folders: ModelFolders) -> None:
    info = await folders.gguf_info(TINY_MODEL_PATH)
    assert (info.architecture, info.block_count, info.context_length) == ("llama", TINY.layers, TINY.context)


def test_relative_parts_drop_empty_and_dot_segments() -> None:
    assert relative_parts("./a//b/./c/") == ("a", "b", "c")
    assert relative_parts("") == ()


SEGMENTS = st.sampled_from(
    ["..", ".", "", "a", "sub", "b.txt", "link-in", "link-out", "file-out", SECRET, "dangling", "loop",
     "~", "C:", "%2e%2e", "...", "a\x00", " "]
)  # fmt: skip
HOSTILE_PATHS = st.builds(
    lambda lead, parts, separator: lead + separator.join(parts),
    st.sampled_from(["", "/", "\\", "C:/", "//"]),
    st.lists(SEGMENTS, max_size=6),
    st.sampled_from(["/", "\\"]),
)


@settings(max_examples=300, deadline=None)
@given(path=HOSTILE_PATHS)
def test_no_generated_path_reaches_outside_the_root(tree: tuple[Path, Path], path: str) -> None:
    root, _ = tree
    folders = ModelFolders([root])
    real_root = root.resolve()
    try:
        listing = anyio.run(folders.list_folder, 0, path)
    except (PathRefusedError, PathNotFoundError, RequestRefusedError):
        pass
    else:
        assert real_root.joinpath(listing.path).resolve().is_relative_to(real_root)
        assert SECRET not in [entry.name for entry in listing.entries]
    [checked] = anyio.run(folders.present, [path])
    # Present only where a lookup inside the root succeeds: never for a path that leaves it.
    if checked.present:
        assert real_root.joinpath(*relative_parts(path)).resolve().is_relative_to(real_root)
    try:
        found = anyio.run(folders.find_file, path)
    except (PathRefusedError, PathNotFoundError, RequestRefusedError):
        return
    assert found.is_relative_to(real_root)
    assert found.name != SECRET
