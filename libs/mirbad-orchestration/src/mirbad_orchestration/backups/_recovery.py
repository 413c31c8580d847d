"""Fleet recovery's part of a backup: what only recovery mode imports, checked before anything is written.

A normal restore takes a backup's models, keys and host services into a master that stays itself.
Recovery makes a new master *be* the lost one: it also takes the nodes' records (their addresses and
pins), the master's identity and the fleet CA, so the running agents accept the new master without
enrolling again. :func:`open_fleet_recovery` opens and checks all of that at once, so a backup that
cannot recover a fleet (a single machine's, one written without a passphrase or without the CA, a
wrong passphrase) is refused before the data directory is touched; :func:`import_nodes` is the step
the restore's import steps leave out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from mirbad_orchestration.exceptions import FleetRecoveryRefusedError, UnknownNodeError
from mirbad_orchestration.fleet import MasterIdentity, NodeRecord, NodeRegistry
from mirbad_protocol import PkiError
from mirbad_protocol.pki import CertificateAuthority

from ._document import BackupDocumentV2, BackupSecrets
from ._format import open_secrets, parse_backup

__all__ = ["FleetRecovery", "NodeImport", "import_nodes", "open_fleet_recovery"]


@dataclass(frozen=True)
class FleetRecovery:
    """An opened backup that can bring a fleet back.

    Attributes:
        document: the fleet's backup (schema version 2).
        secrets: its opened encrypted section (API keys, the share password).
        authority: the fleet CA from the section, checked: the certificate belongs to the key.
    """

    document: BackupDocumentV2
    secrets: BackupSecrets
    authority: CertificateAuthority

    @property
    def master(self) -> MasterIdentity:
        """The identity of the master the backup came from (recovery continues one epoch above it)."""
        return self.document.master

    @property
    def nodes(self) -> list[NodeRecord]:
        """The nodes' records as the backup has them."""
        return list(self.document.nodes)


@dataclass(frozen=True)
class NodeImport:
    """What importing a backup's nodes did.

    Attributes:
        added: ids of the nodes that were not registered.
        replaced: ids of the registered nodes whose record the backup's replaced.
    """

    added: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()


def open_fleet_recovery(raw: bytes | str, passphrase: str) -> FleetRecovery:
    """Read a backup and open everything recovery needs from it, or refuse it whole.

    Raises:
        BackupFormatError: not a backup this master reads (the field is named).
        BackupVersionError: a schema version other than 1 and 2.
        WeakBackupKdfError: the encrypted section's key derivation is too weak.
        FleetRecoveryRefusedError: a single machine's backup (version 1), one without an encrypted
            section, or one whose section holds no usable fleet CA.
        BackupPassphraseError: the passphrase is wrong or the backup was altered.
    """
    backup = parse_backup(raw)
    document = backup.document
    if not isinstance(document, BackupDocumentV2):
        raise FleetRecoveryRefusedError(
            "it is a single machine's backup (schema version 1), with no nodes and no fleet CA; "
            "start a master and restore it instead"
        )
    if document.secrets is None:
        raise FleetRecoveryRefusedError(
            "it was written without a passphrase, so it holds neither the fleet CA nor the API keys; "
            "recovery needs a passphrase backup"
        )
    secrets = open_secrets(backup, passphrase)
    if secrets.ca is None:
        raise FleetRecoveryRefusedError(
            "its encrypted section holds no fleet CA (it was written with the CA left out), so every "
            "node would have to enroll again; start a master, restore it, and enroll the nodes"
        )
    try:
        authority = secrets.ca.authority()
    except PkiError as exc:
        raise FleetRecoveryRefusedError(f"its fleet CA is not usable: {exc}") from None
    return FleetRecovery(document=document, secrets=secrets, authority=authority)


async def import_nodes(registry: NodeRegistry, nodes: Iterable[NodeRecord]) -> NodeImport:
    """Register each of a backup's nodes, replacing a registered node of the same id.

    Raises:
        DuplicateNodeError: another registered node has a backup node's agent URL (the nodes
            imported before it stay).
        NodeRegistryError: the file cannot be read or written.
    """
    added: list[str] = []
    replaced: list[str] = []
    for node in nodes:
        try:
            await registry.get(node.id)
        except UnknownNodeError:
            await registry.add(node)
            added.append(node.id)
        else:
            await registry.update(node)
            replaced.append(node.id)
    return NodeImport(tuple(added), tuple(replaced))
