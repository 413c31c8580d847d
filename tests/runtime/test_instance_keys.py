"""Per-instance API keys: fresh random keys, kept in owner-only files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from mirbad_runtime import FileInstanceKeyProtector, InstanceKeyProtector, new_instance_key
from mirbad_runtime.exceptions import InstanceKeyError


@pytest.fixture
def protector(tmp_path: Path) -> FileInstanceKeyProtector:
    return FileInstanceKeyProtector(tmp_path / "state" / "keys")


def test_new_keys_are_long_random_and_url_safe() -> None:
    keys = {new_instance_key() for _ in range(50)}

    assert len(keys) == 50
    assert all(len(key) == 43 and key.replace("-", "").replace("_", "").isalnum() for key in keys)


def test_a_saved_key_is_loaded_back(protector: FileInstanceKeyProtector) -> None:
    protector.save("tiny", "key-one")
    protector.save("other", "key-two")

    assert protector.load("tiny") == "key-one"
    assert protector.load("other") == "key-two"
    assert isinstance(protector, InstanceKeyProtector)


def test_saving_again_replaces_the_key(protector: FileInstanceKeyProtector) -> None:
    protector.save("tiny", "old")
    protector.save("tiny", "new")

    assert protector.load("tiny") == "new"
    assert sorted(path.name for path in protector.folder.iterdir()) == ["tiny.key"]


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_keys_are_owner_only_at_rest(protector: FileInstanceKeyProtector) -> None:
    protector.save("tiny", new_instance_key())

    assert stat.S_IMODE(protector.folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((protector.folder / "tiny.key").stat().st_mode) == 0o600


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_a_key_file_others_can_read_is_refused(protector: FileInstanceKeyProtector) -> None:
    protector.save("tiny", "secret")
    (protector.folder / "tiny.key").chmod(0o644)

    with pytest.raises(InstanceKeyError, match="open to other users") as caught:
        protector.load("tiny")

    assert caught.value.model_id == "tiny"


def test_a_missing_key_is_none_and_deleting_it_does_nothing(protector: FileInstanceKeyProtector) -> None:
    assert protector.load("tiny") is None
    protector.delete("tiny")

    protector.save("tiny", "secret")
    protector.delete("tiny")

    assert protector.load("tiny") is None


def test_an_empty_key_file_is_refused(protector: FileInstanceKeyProtector) -> None:
    protector.save("tiny", "secret")
    (protector.folder / "tiny.key").write_bytes(b"")

    with pytest.raises(InstanceKeyError, match="empty"):
        protector.load("tiny")


@pytest.mark.parametrize("model_id", ["../escape", "Tiny", "a/b", ""])
def test_a_model_id_that_is_no_file_name_is_refused(
    protector: FileInstanceKeyProtector, model_id: str
) -> None:
    with pytest.raises(InstanceKeyError, match="not a model id"):
        protector.save(model_id, "secret")


@pytest.mark.parametrize("key", ["", " padded", "two\nlines"])
def test_a_blank_or_multiline_key_is_refused(protector: FileInstanceKeyProtector, key: str) -> None:
    with pytest.raises(InstanceKeyError):
        protector.save("tiny", key)
