"""A small fleet's backup contents, shared by the backup tests."""

from __future__ import annotations

from datetime import UTC, datetime

from mirbad_orchestration.backups import (
    BackupContents,
    BackupSecrets,
    FleetCaBackup,
    HostServicesBackup,
    MasterIdentity,
)
from mirbad_orchestration.fleet import NodeRecord
from mirbad_orchestration.services import HostServicesDocument, WhitelistedContainer
from mirbad_protocol import ModelDefinition, ModelSource, Placement
from mirbad_protocol.admin import ApiKeyRecord

CREATED_AT = datetime(2026, 12, 6, 5, 17, 30, tzinfo=UTC)
PASSPHRASE = "correct horse battery"


def key(key_id: str, digit: str = "a", name: str = "notebook") -> ApiKeyRecord:
    """A key record whose hash is one repeated hex digit."""
    return ApiKeyRecord(
        id=key_id,
        name=name,
        prefix="mb_" + key_id[:4],
        secret_sha256=digit * 64,
        created_at=datetime(2026, 1, 2, tzinfo=UTC),
    )


def model(model_id: str = "qwen", **changes: object) -> ModelDefinition:
    """A model on node gpu-1 with one downloadable folder."""
    fields: dict[str, object] = {
        "id": model_id,
        "served_name": f"{model_id}-chat",
        "model_path": model_id,
        "sources": [ModelSource(repo_id=f"acme/{model_id}", folder=model_id)],
        "placement": Placement(node_id="gpu-1"),
    }
    fields.update(changes)
    return ModelDefinition.model_validate(fields)


def contents(*, secrets: bool = True) -> BackupContents:
    """A fleet of two nodes, two models, one whitelisted container and (optionally) its secrets."""
    container = WhitelistedContainer(node="gpu-1", name="open-webui", container_id="c0ffee")
    return BackupContents(
        master=MasterIdentity(instance_id="m-7f3a", epoch=3),
        models=[model("qwen"), model("tiny", sources=[])],
        nodes=[
            NodeRecord(
                id="local",
                name="master-box",
                agent_url="https://127.0.0.1:9443",
                enrolled_at=datetime(2026, 1, 1, tzinfo=UTC),
                local=True,
            ),
            NodeRecord(
                id="gpu-1",
                name="gpu-1",
                agent_url="https://gpu-1.lan:9443",
                enrolled_at=datetime(2026, 2, 1, tzinfo=UTC),
            ),
        ],
        host_services=HostServicesBackup(
            master=HostServicesDocument(containers=[container]),
            nodes={"gpu-1": HostServicesDocument(containers=[container])},
        ),
        secrets=BackupSecrets(
            api_keys=[key("k1aaaaaa", "a"), key("k2bbbbbb", "b", "ci")],
            ca=FleetCaBackup(certificate_pem="-----BEGIN CERTIFICATE-----\n…", private_key_pem="-----BEGIN…"),
            share_password="nas-secret",
        )
        if secrets
        else None,
    )
