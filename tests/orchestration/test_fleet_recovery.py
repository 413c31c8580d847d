"""Fleet recovery's part of a backup: opened whole or refused before anything is written; nodes imported."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.orchestration._backups import CREATED_AT, PASSPHRASE, contents

from mirbad_orchestration.backups import (
    BackupContents,
    BackupSecrets,
    FleetCaBackup,
    encode_backup,
    import_nodes,
    open_fleet_recovery,
)
from mirbad_orchestration.exceptions import (
    BackupPassphraseError,
    DuplicateNodeError,
    FleetRecoveryRefusedError,
)
from mirbad_orchestration.fleet import NodeRecord, NodeRegistry
from mirbad_protocol.pki import CertificateAuthority

CA = CertificateAuthority.create("Mirbad test CA")
CA_BACKUP = FleetCaBackup.of(CA)


def _fleet(*, ca: FleetCaBackup | None = CA_BACKUP) -> BackupContents:
    fleet = contents()
    assert fleet.secrets is not None
    return replace(fleet, secrets=fleet.secrets.model_copy(update={"ca": ca}))


def _encoded(fleet: BackupContents, passphrase: str | None = PASSPHRASE, *, include_ca: bool = True) -> bytes:
    return encode_backup(
        fleet, host="master-box", created_at=CREATED_AT, passphrase=passphrase, include_ca=include_ca
    )


def test_a_fleets_passphrase_backup_opens_with_its_ca_identity_nodes_and_keys() -> None:
    recovery = open_fleet_recovery(_encoded(_fleet()), PASSPHRASE)

    assert recovery.authority.pin == CA.pin
    assert recovery.authority.private_key.public_key() == CA.private_key.public_key()
    assert recovery.master.instance_id == "m-7f3a"
    assert recovery.master.epoch == 3
    assert [node.id for node in recovery.nodes] == ["local", "gpu-1"]
    assert [key.id for key in recovery.secrets.api_keys] == ["k1aaaaaa", "k2bbbbbb"]


def test_a_backup_without_a_passphrase_cannot_recover_a_fleet() -> None:
    with pytest.raises(FleetRecoveryRefusedError, match="without a passphrase"):
        open_fleet_recovery(_encoded(_fleet(), None), PASSPHRASE)


def test_a_backup_written_without_the_ca_cannot_recover_a_fleet() -> None:
    with pytest.raises(FleetRecoveryRefusedError, match="no fleet CA"):
        open_fleet_recovery(_encoded(_fleet(), include_ca=False), PASSPHRASE)


def test_a_single_machines_backup_cannot_recover_a_fleet() -> None:
    document = {"schemaVersion": 1, "createdAt": CREATED_AT.isoformat(), "models": []}

    with pytest.raises(FleetRecoveryRefusedError, match="schema version 1"):
        open_fleet_recovery(json.dumps(document), PASSPHRASE)


def test_a_wrong_passphrase_is_one_error() -> None:
    with pytest.raises(BackupPassphraseError):
        open_fleet_recovery(_encoded(_fleet()), "not the passphrase")


def test_a_ca_whose_key_is_another_is_refused() -> None:
    other = CertificateAuthority.create("another CA")
    mixed = FleetCaBackup(
        certificate_pem=FleetCaBackup.of(CA).certificate_pem,
        private_key_pem=FleetCaBackup.of(other).private_key_pem,
    )

    with pytest.raises(FleetRecoveryRefusedError, match="not usable"):
        open_fleet_recovery(_encoded(_fleet(ca=mixed)), PASSPHRASE)


def test_no_secret_of_the_backup_is_in_its_refusals() -> None:
    fleet = replace(_fleet(), secrets=BackupSecrets(api_keys=[], ca=None, share_password="nas-secret"))

    with pytest.raises(FleetRecoveryRefusedError) as refused:
        open_fleet_recovery(_encoded(fleet), PASSPHRASE)

    assert "nas-secret" not in str(refused.value)


@pytest.mark.anyio
async def test_the_nodes_are_registered_and_a_registered_one_is_replaced(tmp_path: Path) -> None:
    registry = NodeRegistry(tmp_path)
    await registry.add(NodeRecord(id="gpu-1", name="gpu-1", agent_url="https://10.0.0.9:9443"))
    recovery = open_fleet_recovery(_encoded(_fleet()), PASSPHRASE)

    outcome = await import_nodes(registry, recovery.nodes)

    assert outcome.added == ("local",)
    assert outcome.replaced == ("gpu-1",)
    stored = await NodeRegistry(tmp_path).list()
    assert stored == sorted(recovery.nodes, key=lambda node: node.id)
    assert (await registry.get("gpu-1")).agent_url == "https://gpu-1.lan:9443"


@pytest.mark.anyio
async def test_a_node_at_another_nodes_address_is_refused_by_the_registry(tmp_path: Path) -> None:
    registry = NodeRegistry(tmp_path)
    await registry.add(NodeRecord(id="other", name="other", agent_url="https://gpu-1.lan:9443"))
    taken = NodeRecord(
        id="gpu-1",
        name="gpu-1",
        agent_url="https://gpu-1.lan:9443",
        enrolled_at=datetime(2026, 2, 1, tzinfo=UTC),
    )

    with pytest.raises(DuplicateNodeError):
        await import_nodes(registry, [taken])
