"""The encrypted section: any change to what it is bound to, or a wrong passphrase, opens nothing."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.orchestration._backups import CREATED_AT, PASSPHRASE, contents

from mirbad_orchestration.backups import (
    KDF_ITERATIONS,
    MIN_PASSPHRASE_LENGTH,
    check_passphrase,
    encode_backup,
    open_secrets,
    parse_backup,
)
from mirbad_orchestration.exceptions import (
    BackupFormatError,
    BackupPassphraseError,
    BackupPassphraseTooShortError,
    WeakBackupKdfError,
)

RAW = encode_backup(contents(), host="master-box", created_at=CREATED_AT, passphrase=PASSPHRASE)
# Each example derives a key at the full 600,000 iterations (0.1-0.3 s here), so the properties run few.
TAMPER = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(RAW)
    return document


def _flip(encoded: str, index: int, bit: int) -> str:
    data = bytearray(base64.b64decode(encoded))
    data[index % len(data)] ^= 1 << bit
    return base64.b64encode(bytes(data)).decode()


def _refuses(document: dict[str, Any]) -> None:
    backup = parse_backup(json.dumps(document))
    with pytest.raises(BackupPassphraseError):
        open_secrets(backup, PASSPHRASE)


def test_the_right_passphrase_opens_the_untouched_section() -> None:
    assert open_secrets(parse_backup(RAW), PASSPHRASE).share_password == "nas-secret"


def test_whitespace_and_key_order_do_not_matter() -> None:
    document = _document()
    reordered = json.dumps(dict(reversed(list(document.items()))), indent=None)
    assert open_secrets(parse_backup(reordered), PASSPHRASE).share_password == "nas-secret"


@TAMPER
@given(wrong=st.text(min_size=1, max_size=40).filter(lambda text: text != PASSPHRASE))
def test_a_wrong_passphrase_opens_nothing(wrong: str) -> None:
    with pytest.raises(BackupPassphraseError) as refused:
        open_secrets(parse_backup(RAW), wrong)
    assert "passphrase is wrong, or the backup was altered" in str(refused.value)


# Where each binary part lives in the document's encrypted section.
_BINARY = {
    "ciphertext": ("ciphertext",),
    "nonce": ("cipher", "nonce"),
    "salt": ("kdf", "salt"),
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    part=st.sampled_from(sorted(_BINARY)),
    index=st.integers(min_value=0),
    bit=st.integers(min_value=0, max_value=7),
)
def test_a_flipped_ciphertext_nonce_or_salt_byte_opens_nothing(part: str, index: int, bit: int) -> None:
    document = _document()
    *parents, name = _BINARY[part]
    target = document["secrets"]
    for parent in parents:
        target = target[parent]
    target[name] = _flip(target[name], index, bit)
    _refuses(document)


_HEADER_TEXT = ["host", "createdAt"]


@TAMPER
@given(
    field=st.sampled_from(_HEADER_TEXT),
    index=st.integers(min_value=0),
    replacement=st.sampled_from("0123456789abcdefghijklmnopqrstuvwxyz-"),
)
def test_a_changed_header_byte_opens_nothing(field: str, index: int, replacement: str) -> None:
    document = _document()
    text = document[field]
    position = index % len(text)
    changed = text[:position] + replacement + text[position + 1 :]
    if changed == text:
        return
    document[field] = changed
    try:
        backup = parse_backup(json.dumps(document))
    except BackupFormatError:
        return  # no longer a valid header (a date with a letter in it): refused before opening
    with pytest.raises(BackupPassphraseError):
        open_secrets(backup, PASSPHRASE)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("master", "epoch"), 4),
        (("master", "instanceId"), "m-other"),
        (("models", 0, "servedName"), "renamed"),
        (("nodes", 1, "agentUrl"), "https://evil.lan:9443"),
        (("hostServices", "nodes"), {}),
    ],
)
def test_a_changed_plaintext_section_opens_nothing(path: tuple[str | int, ...], value: object) -> None:
    document = _document()
    target: Any = document
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    _refuses(document)


def test_the_section_cannot_be_moved_into_another_backup() -> None:
    raw = encode_backup(contents(), host="other-box", created_at=CREATED_AT, passphrase=PASSPHRASE)
    other = json.loads(raw)
    other["secrets"] = _document()["secrets"]
    _refuses(other)


@pytest.mark.parametrize("iterations", [1, 1000, KDF_ITERATIONS - 1])
def test_a_kdf_downgrade_is_refused_before_the_passphrase_is_tried(iterations: int) -> None:
    document = _document()
    document["secrets"]["kdf"]["iterations"] = iterations
    with pytest.raises(WeakBackupKdfError) as refused:
        parse_backup(json.dumps(document))
    assert refused.value.field == "secrets.kdf.iterations"


def test_a_short_salt_is_refused() -> None:
    document = _document()
    document["secrets"]["kdf"]["salt"] = base64.b64encode(b"12345678").decode()
    with pytest.raises(WeakBackupKdfError) as refused:
        parse_backup(json.dumps(document))
    assert refused.value.field == "secrets.kdf.salt"


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("kdf", "algorithm"), "pbkdf2-sha1", "secrets.kdf.algorithm"),
        (("kdf", "iterations"), 10**9, "secrets.kdf.iterations"),
        (("kdf", "iterations"), "600000", "secrets.kdf.iterations"),
        (("cipher", "algorithm"), "aes-128-gcm", "secrets.cipher.algorithm"),
        (("cipher", "nonce"), base64.b64encode(b"short").decode(), "secrets.cipher.nonce"),
        (("ciphertext",), "not base64!", "secrets.ciphertext"),
    ],
)
def test_other_cipher_parameters_are_refused(path: tuple[str, ...], value: object, field: str) -> None:
    document = _document()
    target = document["secrets"]
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    with pytest.raises(BackupFormatError) as refused:
        parse_backup(json.dumps(document))
    assert refused.value.field == field


def test_a_passphrase_must_be_long_enough() -> None:
    assert check_passphrase("x" * MIN_PASSPHRASE_LENGTH) == "x" * MIN_PASSPHRASE_LENGTH
    with pytest.raises(BackupPassphraseTooShortError):
        check_passphrase("x" * (MIN_PASSPHRASE_LENGTH - 1))
