"""What a backup of this master holds, read from its stores (the scheduler's ``build``).

A composition piece beside :mod:`._job_host`: the scheduler (``mirbad_orchestration.backups``) knows
no store, so the master hands it this. The plain part is the master's identity, the models as the
registry keeps them (placements included), the nodes' records (which hold no secret: the agents'
certificates are pinned by name and key hash) and the host services: the master's whole container
whitelist, and per node the entries and remembered restart policies of that node's containers. The
secrets (API key records, the fleet CA, the share password) are read only for a passphrase backup.
"""

from __future__ import annotations

from mirbad_orchestration import ApiKeyStore, ModelRegistry
from mirbad_orchestration.backups import BackupContents, BackupSecrets, FleetCaBackup, HostServicesBackup
from mirbad_orchestration.fleet import MasterIdentityStore, NodeRegistry
from mirbad_orchestration.services import HostServicesDocument, HostServicesStore
from mirbad_protocol.pki import CertificateAuthority

__all__ = ["MasterBackupSource"]


class MasterBackupSource:
    """Builds a backup's contents from the master's stores (a ``BuildBackup``).

    Args:
        models: the model registry.
        nodes: the node registry.
        host_services: the container whitelist file.
        identity: the master's identity store.
        keys: the API key store.
        authority: the fleet CA.
    """

    def __init__(
        self,
        *,
        models: ModelRegistry,
        nodes: NodeRegistry,
        host_services: HostServicesStore,
        identity: MasterIdentityStore,
        keys: ApiKeyStore,
        authority: CertificateAuthority,
    ) -> None:
        self._models = models
        self._nodes = nodes
        self._host_services = host_services
        self._identity = identity
        self._keys = keys
        self._authority = authority

    async def __call__(self, *, secrets: bool, share_password: str | None = None) -> BackupContents:
        """The contents; with ``secrets``, the API keys, the CA and ``share_password`` too.

        The scheduler leaves out the CA itself when its ``include_ca`` setting is off.
        """
        nodes = await self._nodes.list()
        return BackupContents(
            master=await self._identity.read(),
            models=await self._models.list(),
            nodes=nodes,
            host_services=per_node(await self._host_services.read(), [node.id for node in nodes]),
            secrets=BackupSecrets(
                api_keys=await self._keys.export_records(),
                ca=FleetCaBackup.of(self._authority),
                share_password=share_password,
            )
            if secrets
            else None,
        )


def per_node(document: HostServicesDocument, node_ids: list[str]) -> HostServicesBackup:
    """The master's whitelist whole, and each node's share of it (its containers and their policies)."""
    nodes = {}
    for node_id in node_ids:
        containers = [entry for entry in document.containers if entry.node == node_id]
        policies = {
            key: policy for key, policy in document.restart_policies.items() if key.startswith(f"{node_id}/")
        }
        if containers or policies:
            nodes[node_id] = HostServicesDocument(containers=containers, restart_policies=policies)
    return HostServicesBackup(master=document, nodes=nodes)
