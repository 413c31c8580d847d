"""The backup share's record: the password sealed with AES-256-GCM under a key file, never in clear text.

A security property (hypothesis): any byte flipped in the nonce or the ciphertext, or a record sealed
under another key, is refused as one ``storage_error`` that never carries the password, never a wrong
password.
"""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirbad_master._api_errors import refusal_of
from mirbad_master.backup_share._sealed_share import KEY_FILE, RECORD_FILE, SealedShareStore
from mirbad_master.exceptions import ApiError
from mirbad_protocol.hostd import BackupShareSettings

PASSWORD = "p@ss, =%'\"wörd"
SHARE = BackupShareSettings(kind="cifs", server="nas.local", share="backups", username="backup")


def _sealed(folder: Path, password: str = PASSWORD) -> SealedShareStore:
    store = SealedShareStore(folder)
    anyio.run(store.keep, SHARE, password)
    return store


def test_the_password_round_trips_and_is_nowhere_in_clear_text(tmp_path: Path) -> None:
    store = _sealed(tmp_path)
    record = anyio.run(store.read)
    assert (record.share, record.configured, record.has_password) == (SHARE, True, True)
    assert anyio.run(store.password) == PASSWORD
    for name in (RECORD_FILE, KEY_FILE):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600
        assert PASSWORD.encode() not in (tmp_path / name).read_bytes()
    assert "password" not in json.loads((tmp_path / RECORD_FILE).read_text())["share"]


def test_each_write_uses_a_fresh_nonce_and_the_same_key(tmp_path: Path) -> None:
    store = _sealed(tmp_path)
    first = json.loads((tmp_path / RECORD_FILE).read_text())["sealed"]
    key = (tmp_path / KEY_FILE).read_bytes()
    anyio.run(store.keep, SHARE, PASSWORD)
    second = json.loads((tmp_path / RECORD_FILE).read_text())["sealed"]
    assert first["nonce"] != second["nonce"]
    assert first["ciphertext"] != second["ciphertext"]
    assert (tmp_path / KEY_FILE).read_bytes() == key


def test_a_share_hostd_reports_without_a_record_is_remembered(tmp_path: Path) -> None:
    store = SealedShareStore(tmp_path)
    anyio.run(store.note_configured, True, SHARE)
    record = anyio.run(store.read)
    assert (record.share, record.configured, record.has_password) == (SHARE, True, False)
    anyio.run(store.note_configured, False)
    assert not anyio.run(store.read).configured


def test_no_password_no_record_and_forgetting(tmp_path: Path) -> None:
    store = SealedShareStore(tmp_path)
    assert anyio.run(store.password) is None
    assert not anyio.run(store.read).configured
    anyio.run(
        store.keep, SHARE.model_copy(update={"kind": "nfs", "share": "/export", "username": None}), None
    )
    assert anyio.run(store.password) is None
    anyio.run(store.note_configured, False)
    assert not anyio.run(store.read).configured
    anyio.run(store.forget)
    assert anyio.run(store.read).share is None


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(part=st.sampled_from(["nonce", "ciphertext"]), where=st.integers(min_value=0), bit=st.integers(0, 7))
def test_a_flipped_bit_anywhere_is_refused_without_the_password(
    tmp_path_factory: pytest.TempPathFactory, part: str, where: int, bit: int
) -> None:
    folder = tmp_path_factory.mktemp("sealed")
    store = _sealed(folder)
    document = json.loads((folder / RECORD_FILE).read_text())
    raw = bytearray(base64.b64decode(document["sealed"][part]))
    raw[where % len(raw)] ^= 1 << bit
    document["sealed"][part] = base64.b64encode(bytes(raw)).decode()
    (folder / RECORD_FILE).write_text(json.dumps(document))
    with pytest.raises(ApiError) as refused:
        anyio.run(store.password)
    refusal = refusal_of(refused.value)
    assert (refusal.status, refusal.code) == (500, "storage_error")
    assert PASSWORD not in refusal.message


def test_another_key_or_no_key_cannot_open_it(tmp_path: Path) -> None:
    store = _sealed(tmp_path)
    (tmp_path / KEY_FILE).write_bytes(bytes(32))
    with pytest.raises(ApiError):
        anyio.run(store.password)
    (tmp_path / KEY_FILE).unlink()
    with pytest.raises(ApiError, match="missing"):
        anyio.run(store.password)


def test_a_record_that_is_not_ours_is_refused(tmp_path: Path) -> None:
    (tmp_path / RECORD_FILE).write_text('{"share": null}')
    with pytest.raises(ApiError, match="not a backup share record"):
        anyio.run(SealedShareStore(tmp_path).read)
