"""The digests downloads verify against (issue 31 item 11): sha256 and git blob ids, fed chunk by chunk."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_runtime.downloads import FileDigest

KNOWN_BLOB = (b"hello\n", "ce013625030ba8dba906f756967f9e9ca394464a")  # `git hash-object` of "hello\n"


def _fed(digest: FileDigest, data: bytes, cut: int) -> FileDigest:
    digest.update(data[:cut])
    digest.update(data[cut:])
    return digest


def test_a_git_blob_id_is_what_git_computes() -> None:
    data, blob_id = KNOWN_BLOB
    assert FileDigest(len(data), git_sha1=blob_id).mismatch() is not None  # nothing fed yet
    assert _fed(FileDigest(len(data), git_sha1=blob_id), data, 2).mismatch() is None


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=300), st.integers(0, 255))
def test_any_changed_byte_is_a_mismatch_whatever_the_chunks(data: bytes, cut: int, flip: int) -> None:
    blob = hashlib.sha1(f"blob {len(data)}\0".encode() + data, usedforsecurity=False).hexdigest()
    sha = hashlib.sha256(data).hexdigest()
    assert _fed(FileDigest(len(data), git_sha1=blob), data, cut).mismatch() is None
    assert _fed(FileDigest(len(data), sha256=sha), data, cut).mismatch() is None
    if data and flip:
        changed = bytes([data[0] ^ flip]) + data[1:]
        assert "git blob id" in (_fed(FileDigest(len(data), git_sha1=blob), changed, cut).mismatch() or "")
        assert "sha256" in (_fed(FileDigest(len(data), sha256=sha), changed, cut).mismatch() or "")


def test_a_file_without_a_digest_cannot_be_planned() -> None:
    with pytest.raises(ValueError, match="sha256 or a git blob id"):
        FileDigest(10)
