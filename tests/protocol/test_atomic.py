"""Atomic JSON writes: readers see the old file or the new one; failures leave nothing behind."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from mirbad_protocol.support import remove_stale_temp_files, write_bytes_atomic, write_json_atomic

posix_only = pytest.mark.skipif(os.name != "posix", reason="permission bits are POSIX")


class SimulatedCrashError(Exception):
    """Raised by a before_replace hook: the writer dies between the temp write and the replace."""


def _crash(temp: Path) -> None:
    raise SimulatedCrashError(str(temp))


def test_writes_indented_json_ending_in_a_newline(tmp_path: Path) -> None:
    target = tmp_path / "data.json"
    write_json_atomic(target, {"name": "ünï", "values": [1, 2]})
    text = target.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    assert '"ünï"' in text  # written as UTF-8, not as \u escapes
    assert json.loads(text) == {"name": "ünï", "values": [1, 2]}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data.json"]


def test_replaces_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "data.json"
    target.write_text("old")
    write_bytes_atomic(target, b"new")
    assert target.read_bytes() == b"new"


@posix_only
def test_mode_defaults_to_owner_only_and_is_configurable(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    public = tmp_path / "public.json"
    write_json_atomic(secret, {})
    write_json_atomic(public, {}, mode=0o644)
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert stat.S_IMODE(public.stat().st_mode) == 0o644


def test_hook_sees_the_complete_temp_file_while_the_target_is_still_old(tmp_path: Path) -> None:
    target = tmp_path / "data.json"
    target.write_bytes(b"old")
    seen: list[tuple[str, bytes, bytes]] = []

    def look(temp: Path) -> None:
        seen.append((temp.name, temp.read_bytes(), target.read_bytes()))

    write_bytes_atomic(target, b"new", before_replace=look)
    [(name, temp_content, target_content)] = seen
    assert name.startswith(".data.json.")
    assert name.endswith(".tmp")
    assert (temp_content, target_content) == (b"new", b"old")
    assert target.read_bytes() == b"new"


def test_crash_before_replace_keeps_the_old_file_and_removes_the_temp(tmp_path: Path) -> None:
    target = tmp_path / "data.json"
    write_json_atomic(target, {"version": 1})
    before = target.read_bytes()
    with pytest.raises(SimulatedCrashError):
        write_json_atomic(target, {"version": 2}, before_replace=_crash)
    assert target.read_bytes() == before
    assert json.loads(before) == {"version": 1}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data.json"]


def test_crash_on_a_first_write_leaves_no_file_at_all(tmp_path: Path) -> None:
    with pytest.raises(SimulatedCrashError):
        write_json_atomic(tmp_path / "data.json", [], before_replace=_crash)
    assert list(tmp_path.iterdir()) == []


def test_unencodable_value_touches_nothing(tmp_path: Path) -> None:
    target = tmp_path / "data.json"
    target.write_bytes(b"old")
    with pytest.raises(ValueError, match="JSON"):
        write_json_atomic(target, {"budget": float("nan")})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"when": object()})
    assert target.read_bytes() == b"old"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data.json"]


def test_a_stale_temp_file_does_not_block_the_next_write_and_is_swept(tmp_path: Path) -> None:
    target = tmp_path / "data.json"
    target.write_text('{"version": 1}')
    stale = tmp_path / ".data.json.k3j2h1.tmp"
    stale.write_text('{"version": 2, "trunc')  # what a crash mid-write leaves
    unrelated = [tmp_path / ".other.json.k3j2h1.tmp", tmp_path / "data.json.tmp", tmp_path / "notes.txt"]
    for path in unrelated:
        path.write_text("keep")

    write_json_atomic(target, {"version": 3})
    assert json.loads(target.read_text()) == {"version": 3}

    assert remove_stale_temp_files(target) == [stale]
    assert not stale.exists()
    assert all(path.read_text() == "keep" for path in unrelated)
    assert remove_stale_temp_files(target) == []


def test_sweeping_a_missing_folder_finds_nothing(tmp_path: Path) -> None:
    assert remove_stale_temp_files(tmp_path / "absent" / "data.json") == []


def test_missing_folder_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_bytes_atomic(tmp_path / "absent" / "data.json", b"x")
