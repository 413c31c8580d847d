"""Backup file names: what the scheduler writes is what the checker accepts, and nothing with a path."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import PurePosixPath, PureWindowsPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_orchestration.backups import backup_file_name, backup_host_label, parse_backup_file_name

STAMPED = datetime(2026, 12, 6, 5, 17, 30, tzinfo=UTC)


def test_a_name_carries_the_host_label_and_the_utc_stamp() -> None:
    local = STAMPED.astimezone(timezone(timedelta(hours=2)))
    assert backup_file_name("Lab-GPU.local", local) == "mirbad-backup-lab-gpu-local-20261206T051730Z.json"


@pytest.mark.parametrize(
    ("host", "label"),
    [
        ("master", "master"),
        ("Lab_GPU 01", "lab-gpu-01"),
        ("--", "master"),
        ("ümlaut", "mlaut"),
        ("a" * 80, "a" * 63),
    ],
)
def test_host_labels(host: str, label: str) -> None:
    assert backup_host_label(host) == label


@given(host=st.text(max_size=100), seconds=st.integers(min_value=0, max_value=4_000_000_000))
def test_every_written_name_is_accepted_and_parses_back(host: str, seconds: int) -> None:
    created_at = datetime.fromtimestamp(seconds, UTC)
    name = backup_file_name(host, created_at)
    parsed = parse_backup_file_name(name)
    assert parsed is not None
    assert parsed.created_at == created_at
    assert parsed.host == backup_host_label(host)
    assert parsed.name == name


# Near misses too: random text alone almost never comes close to the shape.
_STAMP = r"20[0-9]{2}(0[1-9]|1[0-2])(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3])[0-5][0-9][0-5][0-9]Z"
_NEAR = st.from_regex(rf"mirbad-backup-[a-z0-9./\\-]{{1,20}}-{_STAMP}\.json(|.)", fullmatch=True)


@given(name=st.text(max_size=120) | _NEAR)
def test_no_accepted_name_holds_a_path(name: str) -> None:
    if parse_backup_file_name(name) is None:
        return
    assert PurePosixPath(name).name == name
    assert PureWindowsPath(name).name == name
    assert ".." not in name
    assert not set(name) & {"/", "\\", "\x00", ":", "\n"}
    assert re.fullmatch(r"[a-z0-9TZ.-]+", name)


@pytest.mark.parametrize(
    "name",
    [
        "../mirbad-backup-m-20261206T051730Z.json",
        "mirbad-backup-m-20261206T051730Z.json/",
        "sub/mirbad-backup-m-20261206T051730Z.json",
        "mirbad-backup-m-20261206T051730Z.json\n",
        "mirbad-backup-m-20261206T051730Z.json.tmp",
        ".mirbad-backup-m-20261206T051730Z.json.abc.tmp",
        "mirbad-backup-M-20261206T051730Z.json",
        "mirbad-backup--20261206T051730Z.json",
        "mirbad-backup-m-20261306T051730Z.json",
        "mirbad-backup-m-20261206T051730.json",
        "mirbad-backup-..-20261206T051730Z.json",
        "api-keys.json",
    ],
)
def test_other_names_are_refused(name: str) -> None:
    assert parse_backup_file_name(name) is None


def test_names_sort_by_time() -> None:
    older = parse_backup_file_name(backup_file_name("m", STAMPED))
    newer = parse_backup_file_name(backup_file_name("m", STAMPED + timedelta(seconds=1)))
    assert older is not None
    assert newer is not None
    assert older < newer
