"""Fleet recovery mode: a new master becomes the lost one from a passphrase backup (``mirbad up --recover``).

Besides what a restore imports (models, API keys, the master's host services) recovery puts back the
nodes' records, the master's identity one epoch up and the fleet CA, so the running agents accept the
new master (its client certificate is issued by the same CA) without enrolling again; their running
models are then adopted, not restarted (:mod:`._model_adoption`).

It only ever writes a data directory that holds no master. Everything is imported into a staging
folder inside it first and moved into place only once the whole import worked, under a marker file,
so a recovery that stopped half-way (a crash, a full disk) is redone by the next run instead of
refused. A directory that already holds the recovered master (the second start of a container whose
environment still asks for recovery) starts normally; one holding another master is refused: a
recovery over it would replace the CA its own nodes trust and mix two fleets' registries, so there is
no ``--force`` (moving the directory aside is one command and keeps it for inspection).
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio

from mirbad_orchestration import ApiKeyStore, ModelRegistry
from mirbad_orchestration.backups import (
    FleetRecovery,
    HostServicesImport,
    ModelImport,
    NodeImport,
    backup_host_services,
    backup_models,
    import_host_services,
    import_keys,
    import_models,
    import_nodes,
    open_fleet_recovery,
)
from mirbad_orchestration.exceptions import StateFileError
from mirbad_orchestration.fleet import (
    MASTER_IDENTITY_FILE,
    NODES_FILE_NAME,
    MasterIdentity,
    MasterIdentityStore,
    NodeRegistry,
)
from mirbad_orchestration.keys import API_KEYS_FILE, ApiKeyImport
from mirbad_orchestration.registry import REGISTRY_FILE_NAME, SEED_MODEL
from mirbad_orchestration.services import HostServicesStore
from mirbad_orchestration.stores import AuditLog
from mirbad_protocol import InvalidFieldError

from ._local_pki import PKI_FOLDER
from .exceptions import DataDirHoldsMasterError

__all__ = [
    "RECOVERY_ACTOR",
    "RecoveredFleet",
    "read_fleet_recovery",
    "recover_fleet",
    "recovery_banner",
]

RECOVERY_ACTOR: Final = "system:recovery"
"""The audit actor of what fleet recovery imports and adopts."""

MAX_BACKUP_BYTES: Final = 64 * 1024 * 1024
"""The largest backup file recovery reads (as the restore's upload limit)."""

_STAGING: Final = ".recovery-staging"
_MARKER: Final = ".recovery-incomplete"
# Any of these says a master has used the directory (the CA is made by every first start).
_MASTER_FILES: Final = (
    MASTER_IDENTITY_FILE,
    f"{PKI_FOLDER}/ca.crt",
    NODES_FILE_NAME,
    REGISTRY_FILE_NAME,
    API_KEYS_FILE,
)
_logger = logging.getLogger("mirbad_master")


@dataclass(frozen=True)
class RecoveredFleet:
    """What a recovery imported into the data directory.

    Attributes:
        identity: the master's identity as stored (the backup's instance id, its epoch + 1).
        previous_epoch: the epoch in the backup.
        nodes: the nodes registered.
        models: the models stored.
        keys: the API keys merged.
        host_services: the master's host services merged.
        ca_pin: the ``pin-sha256`` of the fleet CA put back.
    """

    identity: MasterIdentity
    previous_epoch: int
    nodes: NodeImport
    models: ModelImport
    keys: ApiKeyImport
    host_services: HostServicesImport
    ca_pin: str


def read_fleet_recovery(path: Path, passphrase: str) -> FleetRecovery:
    """Read the backup at ``path`` and open what recovery needs (blocking: the KDF takes a moment).

    Raises:
        InvalidFieldError: the file cannot be read or is too large (field ``--recover``).
        BackupError: the backup cannot recover a fleet, or the passphrase is wrong (see
            :func:`~mirbad_orchestration.backups.open_fleet_recovery`).
    """
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_BACKUP_BYTES + 1)
    except OSError as exc:
        raise InvalidFieldError("--recover", f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_BACKUP_BYTES:
        raise InvalidFieldError("--recover", f"{path} is larger than {MAX_BACKUP_BYTES} bytes: not a backup")
    return open_fleet_recovery(raw, passphrase)


async def recover_fleet(data_dir: Path, recovery: FleetRecovery, *, source: str) -> RecoveredFleet | None:
    """Import ``recovery`` into ``data_dir`` (see the module); None when it holds that master already.

    Args:
        data_dir: the new master's data directory (it exists and is this master's, locked).
        recovery: the opened backup.
        source: what the audit line names as the backup (its file name).

    Raises:
        DataDirHoldsMasterError: the directory holds another master (nothing is written).
        MirbadError: a store could not be written (nothing was moved into place).
        OSError: the directory cannot be written.
    """
    if not (data_dir / _MARKER).exists() and await _holds_recovered_master(data_dir, recovery):
        return None
    staging = data_dir / _STAGING
    await anyio.to_thread.run_sync(_fresh_folder, staging)
    recovered = await _import(staging, recovery)
    await anyio.to_thread.run_sync(_move_into_place, staging, data_dir, recovery.master.instance_id)
    await _audit(AuditLog(data_dir), recovered, recovery, source)
    _logger.info(
        "fleet recovery from %s: master %s at epoch %d (backup's %d); nodes %s; models %s; "
        "API keys added %s; fleet CA %s",
        source,
        recovered.identity.instance_id,
        recovered.identity.epoch,
        recovered.previous_epoch,
        _names([*recovered.nodes.added, *recovered.nodes.replaced]),
        _names(recovered.models.imported),
        _names(recovered.keys.added),
        recovered.ca_pin,
    )
    return recovered


def recovery_banner(recovered: RecoveredFleet | None, source: str) -> str:
    """The lines ``mirbad up --recover`` prints before its banner."""
    if recovered is None:
        return f"Fleet recovery from {source}: this data directory already holds that master; starting it."
    nodes = (*recovered.nodes.added, *recovered.nodes.replaced)
    lines = [
        f"Recovered the fleet from {source}: master {recovered.identity.instance_id}, epoch "
        f"{recovered.identity.epoch} (the backup's was {recovered.previous_epoch}).",
        f"  Nodes:    {_names(nodes)} (their agents are reached with the same fleet CA; none enrolls again)",
        f"  Models:   {_names(recovered.models.imported)}",
        f"  API keys: {len(recovered.keys.added)} restored",
    ]
    if recovered.models.refused:
        lines.append(f"  Not imported: {_names(tuple(recovered.models.refused))} (see the log)")
    return "\n".join(lines)


async def _holds_recovered_master(data_dir: Path, recovery: FleetRecovery) -> bool:
    found = [name for name in _MASTER_FILES if (data_dir / name).exists()]
    if not found:
        return False
    try:
        here = await MasterIdentityStore(data_dir).read() if MASTER_IDENTITY_FILE in found else None
    except StateFileError:
        here = None
    if here is not None and here.instance_id == recovery.master.instance_id:
        _logger.info(
            "fleet recovery: %s already holds master %s (epoch %d); not recovering again",
            data_dir,
            here.instance_id,
            here.epoch,
        )
        return True
    raise DataDirHoldsMasterError(data_dir, found[0])


async def _import(staging: Path, recovery: FleetRecovery) -> RecoveredFleet:
    document = recovery.document
    pki = staging / PKI_FOLDER
    await anyio.to_thread.run_sync(lambda: recovery.authority.save(_private_folder(pki)))
    nodes = await import_nodes(NodeRegistry(staging), recovery.nodes)
    registry = ModelRegistry(staging)
    models = await import_models(registry, backup_models(document))
    if SEED_MODEL.id not in models.imported:
        # A new registry seeds its example model; the recovered one holds the backup's models only.
        await registry.delete(SEED_MODEL.id)
    async with ApiKeyStore(staging) as keys:
        imported_keys = await import_keys(keys, recovery.secrets.api_keys)
    host_services = await import_host_services(HostServicesStore(staging), backup_host_services(document))
    identity = await MasterIdentityStore(staging).recover(recovery.master)
    return RecoveredFleet(
        identity=identity,
        previous_epoch=recovery.master.epoch,
        nodes=nodes,
        models=models,
        keys=imported_keys,
        host_services=host_services,
        ca_pin=recovery.authority.pin,
    )


def _fresh_folder(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)  # left by a recovery that stopped before its moves
    _private_folder(path)


def _private_folder(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _move_into_place(staging: Path, data_dir: Path, instance_id: str) -> None:
    # The marker says "redo me" until every file is in place; written before the first move.
    marker = data_dir / _MARKER
    marker.write_text(f"{instance_id}\n", encoding="utf-8")
    for entry in sorted(staging.iterdir()):
        target = data_dir / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)  # only a half-done recovery's own folder gets here
        os.replace(entry, target)
    staging.rmdir()
    marker.unlink()


async def _audit(audit: AuditLog, recovered: RecoveredFleet, recovery: FleetRecovery, source: str) -> None:
    identity = recovered.identity
    detail = (
        f"master {identity.instance_id} epoch {recovered.previous_epoch} -> {identity.epoch}; "
        f"fleet CA {recovered.ca_pin}"
    )
    await audit.record(RECOVERY_ACTOR, "fleet.recover", source, detail=detail)
    for node in recovery.nodes:
        await audit.record(RECOVERY_ACTOR, "node.recover", node.id, node_id=node.id, detail=node.agent_url)
    for model_id in recovered.models.imported:
        await audit.record(RECOVERY_ACTOR, "model.recover", model_id)
    for model_id, reason in recovered.models.refused.items():
        await audit.record(RECOVERY_ACTOR, "model.recover", model_id, outcome="refused", detail=reason)
    for key_id in recovered.keys.added:
        await audit.record(RECOVERY_ACTOR, "key.recover", key_id)
    for key_id in recovered.keys.conflicts:
        await audit.record(RECOVERY_ACTOR, "key.recover", key_id, outcome="refused", detail="id or hash here")


def _names(ids: tuple[str, ...] | list[str]) -> str:
    return ", ".join(ids) if ids else "none"
