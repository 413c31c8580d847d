"""Instance keys sealed with DPAPI (the Windows protector), over the hand-written DPAPI stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirbad_runtime import DpapiInstanceKeyProtector, InstanceKeyProtector, new_instance_key
from mirbad_runtime.exceptions import DpapiError, InstanceKeyError
from mirbad_runtime.testing import FakeDpapi


def _protector(tmp_path: Path, dpapi: FakeDpapi) -> DpapiInstanceKeyProtector:
    return DpapiInstanceKeyProtector(tmp_path / "state" / "keys", dpapi)


def test_a_sealed_key_is_opened_back_and_never_stored_in_plain(tmp_path: Path) -> None:
    dpapi = FakeDpapi()
    protector = _protector(tmp_path, dpapi)
    key = new_instance_key()

    protector.save("tiny", key)
    stored = (tmp_path / "state" / "keys" / "tiny.dpapi").read_bytes()

    assert isinstance(protector, InstanceKeyProtector)
    assert key.encode() not in stored
    assert protector.load("tiny") == key
    # The model id is the entropy: both calls bind the blob to this model.
    assert [operation for operation, _ in dpapi.calls] == ["protect", "unprotect"]
    assert {entropy for _, entropy in dpapi.calls} == {b"mirbad instance key\x00tiny"}


def test_another_accounts_blob_is_refused(tmp_path: Path) -> None:
    _protector(tmp_path, FakeDpapi(b"agent-account")).save("tiny", "key-one")

    with pytest.raises(InstanceKeyError, match="does not open with DPAPI"):
        _protector(tmp_path, FakeDpapi(b"another-account")).load("tiny")


def test_a_blob_copied_over_another_models_file_is_refused(tmp_path: Path) -> None:
    protector = _protector(tmp_path, FakeDpapi())
    protector.save("tiny", "tiny-key")
    keys = tmp_path / "state" / "keys"
    (keys / "other.dpapi").write_bytes((keys / "tiny.dpapi").read_bytes())

    with pytest.raises(InstanceKeyError) as refused:
        protector.load("other")

    assert refused.value.model_id == "other"


def test_a_damaged_blob_is_refused(tmp_path: Path) -> None:
    protector = _protector(tmp_path, FakeDpapi())
    protector.save("tiny", "tiny-key")
    path = tmp_path / "state" / "keys" / "tiny.dpapi"
    blob = bytearray(path.read_bytes())
    blob[0] ^= 0xFF
    path.write_bytes(bytes(blob))

    with pytest.raises(InstanceKeyError):
        protector.load("tiny")


def test_missing_and_deleted_keys_read_as_none(tmp_path: Path) -> None:
    protector = _protector(tmp_path, FakeDpapi())
    protector.save("tiny", "tiny-key")
    protector.delete("tiny")
    protector.delete("never-saved")

    assert protector.load("tiny") is None
    assert protector.load("never-saved") is None


def test_blank_keys_and_ids_that_climb_out_are_refused(tmp_path: Path) -> None:
    protector = _protector(tmp_path, FakeDpapi())

    with pytest.raises(InstanceKeyError, match="non-blank"):
        protector.save("tiny", " ")
    with pytest.raises(InstanceKeyError, match="not a model id"):
        protector.save("../escape", "key")


class _RefusingDpapi(FakeDpapi):
    def protect(self, data: bytes, entropy: bytes) -> bytes:
        raise DpapiError("The system cannot find the file specified")


def test_dpapi_refusing_to_seal_is_an_instance_key_error(tmp_path: Path) -> None:
    protector = DpapiInstanceKeyProtector(tmp_path / "keys", _RefusingDpapi())

    with pytest.raises(InstanceKeyError, match="could not seal"):
        protector.save("tiny", "key")
    assert not (tmp_path / "keys" / "tiny.dpapi").exists()


@given(data=st.binary(max_size=200), entropy=st.binary(max_size=40))
def test_the_stand_in_round_trips_and_binds_its_entropy(data: bytes, entropy: bytes) -> None:
    dpapi = FakeDpapi()
    blob = dpapi.protect(data, entropy)

    assert dpapi.unprotect(blob, entropy) == data
    with pytest.raises(DpapiError):
        dpapi.unprotect(blob, entropy + b"!")
