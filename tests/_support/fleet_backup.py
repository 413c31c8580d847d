"""A fleet's passphrase backup made from a master's data directory with the backups library.

The master's own "back up now" composes the same contents from the same stores; this helper reads
them from the files while the master runs (every store writes atomically), so the recovery tests need
nothing but the library and a data directory.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from pathlib import Path

import anyio

from mirbad_orchestration import ApiKeyStore, ModelRegistry
from mirbad_orchestration.backups import (
    BackupContents,
    BackupSecrets,
    FleetCaBackup,
    HostServicesBackup,
    backup_file_name,
    encode_backup,
)
from mirbad_orchestration.fleet import MasterIdentityStore, NodeRegistry
from mirbad_orchestration.services import HostServicesStore
from mirbad_protocol.pki import CertificateAuthority

__all__ = ["write_fleet_backup"]


def write_fleet_backup(data_dir: Path, folder: Path, passphrase: str) -> Path:
    """Write ``data_dir``'s fleet as an encrypted backup into ``folder``; return the file."""
    contents = anyio.run(_contents, data_dir)
    host = socket.gethostname()
    created_at = datetime.now(UTC).replace(microsecond=0)
    data = encode_backup(contents, host=host, created_at=created_at, passphrase=passphrase)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / backup_file_name(host, created_at)
    path.write_bytes(data)
    return path


async def _contents(data_dir: Path) -> BackupContents:
    async with ApiKeyStore(data_dir) as keys:
        records = await keys.export_records()
    return BackupContents(
        master=await MasterIdentityStore(data_dir).read(),
        models=await ModelRegistry(data_dir).list(),
        nodes=await NodeRegistry(data_dir).list(),
        host_services=HostServicesBackup(master=await HostServicesStore(data_dir).read()),
        secrets=BackupSecrets(
            api_keys=records, ca=FleetCaBackup.of(CertificateAuthority.load(data_dir / "pki"))
        ),
    )
