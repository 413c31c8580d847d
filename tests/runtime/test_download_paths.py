"""Nothing a download writes can land outside its model root, whatever folder or file name it is given."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from mirbad_protocol import InvalidFieldError
from mirbad_protocol.downloads import HuggingFaceDownload, check_download_folder
from mirbad_runtime.downloads import TEMP_PREFIX, check_file_path
from mirbad_runtime.exceptions import DownloadRefusedError

ROOT = Path("/models/root")
_SEGMENT = st.sampled_from(["..", ".", "", "a", "b.gguf", "~", "C:", "\\", "..\\..", "\x00", " ", "x y"])
_PATHS = st.one_of(
    st.text(max_size=40),
    st.lists(_SEGMENT, max_size=6).map("/".join),
    st.lists(_SEGMENT, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts)),
)


def _inside(base: Path, relative: str) -> bool:
    # Lexical resolution is enough here: the agent creates the folders itself, so no symlink is in them.
    joined = os.path.normpath(base / relative)
    return Path(joined).is_relative_to(base) and Path(joined) != base


@given(_PATHS)
@example("..")
@example("a/..")
@example("C:\\models")
@example(".mirbad-download-x")
def test_an_accepted_folder_is_one_visible_name_directly_under_the_root(folder: str) -> None:
    try:
        accepted = check_download_folder(folder)
    except ValueError:
        return
    target = ROOT / accepted
    assert target.parent == ROOT
    assert _inside(ROOT, accepted)
    assert not accepted.startswith(TEMP_PREFIX[0])  # never mistaken for a job's temporary folder


@given(_PATHS)
@example("../etc/passwd")
@example("weights/../../x")
@example("/etc/passwd")
@example("a\\..\\..\\x")
def test_an_accepted_file_path_stays_inside_the_jobs_folder(path: str) -> None:
    temp = ROOT / f"{TEMP_PREFIX}dl-1"
    field: str | None = None
    try:
        accepted = check_file_path(path)
    except DownloadRefusedError as refused:
        field = refused.field
    else:
        assert _inside(temp, accepted)
    assert field in (None, "files")


@given(_PATHS)
def test_a_request_refuses_every_folder_the_check_refuses(folder: str) -> None:
    try:
        check_download_folder(folder)
        valid = True
    except ValueError:
        valid = False
    body = {"kind": "huggingface", "repoId": "a/b", "folder": folder}
    if valid:
        assert HuggingFaceDownload.from_user_input(body).folder == folder
    else:
        with pytest.raises(InvalidFieldError) as refused:
            HuggingFaceDownload.from_user_input(body)
        assert refused.value.field == "folder"
