"""Backup documents: version 2 written and read back, version 1 read, everything else refused."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from syrupy.assertion import SnapshotAssertion
from tests.orchestration._backups import CREATED_AT, PASSPHRASE, contents, key, model

from mirbad_orchestration.backups import (
    BackupDocumentV1,
    BackupDocumentV2,
    BackupSecrets,
    FleetCaBackup,
    encode_backup,
    open_secrets,
    parse_backup,
)
from mirbad_orchestration.backups._crypto import encrypt_secrets
from mirbad_orchestration.exceptions import (
    BackupFormatError,
    BackupNotEncryptedError,
    BackupPassphraseTooShortError,
    BackupVersionError,
)
from mirbad_protocol import PkiError
from mirbad_protocol.pki import CertificateAuthority


def _fixed_entropy(size: int) -> bytes:
    return bytes(range(size))


def test_a_passphrase_backup_round_trips_every_section() -> None:
    written = contents()
    raw = encode_backup(written, host="Master-Box", created_at=CREATED_AT, passphrase=PASSPHRASE)
    backup = parse_backup(raw)
    document = backup.document
    assert isinstance(document, BackupDocumentV2)
    assert backup.encrypted
    assert backup.schema_version == 2
    assert document.created_at == CREATED_AT
    assert document.host == "Master-Box"
    assert document.master == written.master
    assert document.models == list(written.models)
    assert document.nodes == list(written.nodes)
    assert document.host_services == written.host_services
    assert open_secrets(backup, PASSPHRASE) == written.secrets


def test_no_secret_is_readable_in_the_file() -> None:
    raw = encode_backup(contents(), host="m", created_at=CREATED_AT, passphrase=PASSPHRASE)
    text = raw.decode()
    for secret in ("nas-secret", "a" * 64, "BEGIN CERTIFICATE", "notebook"):
        assert secret not in text


def test_without_a_passphrase_the_secrets_are_left_out() -> None:
    raw = encode_backup(contents(), host="m", created_at=CREATED_AT)
    backup = parse_backup(raw)
    assert not backup.encrypted
    assert "secrets" not in json.loads(raw)
    assert "nas-secret" not in raw.decode()
    with pytest.raises(BackupNotEncryptedError):
        open_secrets(backup, PASSPHRASE)


def test_the_ca_stays_out_when_the_setting_says_so() -> None:
    raw = encode_backup(contents(), host="m", created_at=CREATED_AT, passphrase=PASSPHRASE, include_ca=False)
    secrets = open_secrets(parse_backup(raw), PASSPHRASE)
    assert secrets.ca is None
    assert secrets.share_password == "nas-secret"
    assert len(secrets.api_keys) == 2


def test_a_passphrase_backup_of_no_secrets_has_an_empty_section() -> None:
    raw = encode_backup(contents(secrets=False), host="m", created_at=CREATED_AT, passphrase=PASSPHRASE)
    assert open_secrets(parse_backup(raw), PASSPHRASE) == BackupSecrets()


def test_a_short_passphrase_is_refused_before_anything_is_written() -> None:
    with pytest.raises(BackupPassphraseTooShortError) as refused:
        encode_backup(contents(), host="m", created_at=CREATED_AT, passphrase="short")
    assert refused.value.field == "passphrase"


def test_the_shape_of_a_version_2_document(snapshot_json: SnapshotAssertion) -> None:
    # Fixed salt and nonce only here, so the ciphertext is stable for the snapshot.
    raw = encode_backup(
        contents(), host="master-box", created_at=CREATED_AT, passphrase=PASSPHRASE, entropy=_fixed_entropy
    )
    assert json.loads(raw) == snapshot_json


def test_a_version_1_document_is_read() -> None:
    v1 = {
        "schemaVersion": 1,
        "createdAt": "2025-06-01T10:00:00Z",
        "host": "old-box",
        "models": [model("legacy", placement=None).to_wire()],
        "hostServices": {"containers": [{"node": "local", "name": "open-webui"}]},
    }
    backup = parse_backup(json.dumps(v1))
    assert isinstance(backup.document, BackupDocumentV1)
    assert backup.schema_version == 1
    assert [m.id for m in backup.document.models] == ["legacy"]
    assert backup.document.models[0].placement is None
    assert backup.document.host_services.containers[0].name == "open-webui"
    assert backup.document.created_at == datetime(2025, 6, 1, 10, tzinfo=UTC)


@pytest.mark.parametrize("version", [0, 3, "2", None, True, 2.0])
def test_other_versions_are_refused(version: object) -> None:
    document = json.loads(encode_backup(contents(), host="m", created_at=CREATED_AT))
    document["schemaVersion"] = version
    with pytest.raises(BackupVersionError) as refused:
        parse_backup(json.dumps(document))
    assert refused.value.field == "schemaVersion"


def test_a_missing_version_is_refused() -> None:
    document = json.loads(encode_backup(contents(), host="m", created_at=CREATED_AT))
    del document["schemaVersion"]
    with pytest.raises(BackupVersionError):
        parse_backup(json.dumps(document))


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe\x00garbage", "not"),
        (b"[1, 2]", "JSON object"),
        (b'{"schemaVersion": 2, "createdAt": NaN}', "not JSON"),
    ],
)
def test_bad_json_is_refused(raw: bytes, reason: str) -> None:
    with pytest.raises(BackupFormatError) as refused:
        parse_backup(raw)
    assert refused.value.field == "(document)"
    assert reason in refused.value.reason


def test_an_unknown_field_is_refused_by_name() -> None:
    document = json.loads(encode_backup(contents(), host="m", created_at=CREATED_AT))
    document["models"][0]["servedNmae"] = "typo"
    with pytest.raises(BackupFormatError) as refused:
        parse_backup(json.dumps(document))
    assert refused.value.field == "models.0.servedNmae"
    assert "servedName" in refused.value.reason


def test_an_unknown_top_level_field_is_refused() -> None:
    document = json.loads(encode_backup(contents(), host="m", created_at=CREATED_AT))
    document["extras"] = {}
    with pytest.raises(BackupFormatError) as refused:
        parse_backup(json.dumps(document))
    assert refused.value.field == "extras"


def test_a_wrong_type_is_refused_by_name() -> None:
    document = json.loads(encode_backup(contents(), host="m", created_at=CREATED_AT))
    document["master"]["epoch"] = -1
    with pytest.raises(BackupFormatError) as refused:
        parse_backup(json.dumps(document))
    assert refused.value.field == "master.epoch"


def test_the_keys_in_a_backup_keep_their_hashes() -> None:
    raw = encode_backup(contents(), host="m", created_at=CREATED_AT, passphrase=PASSPHRASE)
    keys = open_secrets(parse_backup(raw), PASSPHRASE).api_keys
    assert keys == [key("k1aaaaaa", "a"), key("k2bbbbbb", "b", "ci")]


def test_an_encrypted_version_1_document_opens_with_its_keys() -> None:
    document: dict[str, object] = {
        "schemaVersion": 1,
        "createdAt": "2025-06-01T10:00:00Z",
        "models": [model("legacy", placement=None).to_wire()],
    }
    encrypt_secrets(BackupSecrets(api_keys=[key("k1aaaaaa")]), PASSPHRASE, document)
    backup = parse_backup(json.dumps(document))
    assert backup.schema_version == 1
    assert backup.encrypted
    assert open_secrets(backup, PASSPHRASE).api_keys == [key("k1aaaaaa")]


def test_the_fleet_ca_survives_a_backup() -> None:
    authority = CertificateAuthority.create("Mirbad CA test")
    secrets = BackupSecrets(ca=FleetCaBackup.of(authority))
    written = replace(contents(), secrets=secrets)
    raw = encode_backup(written, host="m", created_at=CREATED_AT, passphrase=PASSPHRASE)
    restored = open_secrets(parse_backup(raw), PASSPHRASE).ca
    assert restored is not None
    again = restored.authority()
    assert again.pin == authority.pin
    assert again.certificate == authority.certificate


def test_a_backup_ca_that_does_not_match_its_key_is_refused() -> None:
    one, other = CertificateAuthority.create("one"), CertificateAuthority.create("other")
    mixed = FleetCaBackup(
        certificate_pem=FleetCaBackup.of(one).certificate_pem,
        private_key_pem=FleetCaBackup.of(other).private_key_pem,
    )
    with pytest.raises(PkiError):
        mixed.authority()


def test_a_number_beyond_a_float_is_refused() -> None:
    raw = encode_backup(contents(), host="m", created_at=CREATED_AT).replace(b'"epoch": 3', b'"epoch": 1e400')
    with pytest.raises(BackupFormatError) as refused:
        parse_backup(raw)
    assert refused.value.field == "(document)"
