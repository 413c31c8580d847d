"""The import steps of a restore: a backup's models, API keys and host services into the real stores.

Each step changes one store and returns what it changed, so the restore job can report it and a test
can compare it. A normal restore runs exactly these three; the nodes, the master identity and the
fleet CA are fleet recovery's alone (they would make this master someone it is not).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mirbad_orchestration.fleet import LOCAL_NODE_ID
from mirbad_orchestration.keys import ApiKeyImport, ApiKeyStore
from mirbad_orchestration.registry import ModelRegistry
from mirbad_orchestration.services import HostServicesDocument, HostServicesStore, policy_key
from mirbad_protocol import InvalidFieldError, ModelDefinition, Placement
from mirbad_protocol.admin import ApiKeyRecord

from ._document import BackupDocument, BackupDocumentV1

__all__ = [
    "HostServicesImport",
    "ModelImport",
    "backup_host_services",
    "backup_models",
    "import_host_services",
    "import_keys",
    "import_models",
]


@dataclass(frozen=True)
class ModelImport:
    """What upserting a backup's models did.

    Attributes:
        added: ids of the models that were not here.
        changed: ids of the models whose stored definition the backup replaced.
        unchanged: ids of the models already stored exactly as the backup has them.
        refused: per model id, why the registry refused it (a served name another model uses, say);
            the other models are imported all the same.
    """

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    refused: dict[str, str] = field(default_factory=dict)

    @property
    def imported(self) -> tuple[str, ...]:
        """Ids of the models that are now stored as the backup has them."""
        return (*self.added, *self.changed, *self.unchanged)


@dataclass(frozen=True)
class HostServicesImport:
    """What importing a backup's host services did.

    Attributes:
        containers: ``node/name`` of the whitelist entries added or replaced by the backup's.
        restart_policies: keys of the remembered restart policies added or replaced.
    """

    containers: tuple[str, ...] = ()
    restart_policies: tuple[str, ...] = ()


def backup_models(
    document: BackupDocument, *, bootstrap_node_id: str = LOCAL_NODE_ID
) -> list[ModelDefinition]:
    """The models a restore stores: a version 1 backup's on the bootstrap node, a version 2's as placed.

    A single machine's backup (version 1) knows no nodes, so its models go to the node that stands for
    that machine now; a fleet's backup (version 2) keeps each model's placement.
    """
    if not isinstance(document, BackupDocumentV1):
        return list(document.models)
    placement = Placement(node_id=bootstrap_node_id)
    return [model.model_copy(update={"placement": placement}) for model in document.models]


def backup_host_services(document: BackupDocument) -> HostServicesDocument:
    """The master's host services in a backup (a version 1 backup's one document is the machine's)."""
    if isinstance(document, BackupDocumentV1):
        return document.host_services
    return document.host_services.master


async def import_models(registry: ModelRegistry, models: Iterable[ModelDefinition]) -> ModelImport:
    """Upsert each model: the backup's definition replaces the stored one of the same id.

    Args:
        registry: the model registry.
        models: the models to store (:func:`backup_models` of the backup).

    Raises:
        RegistryError: the registry file cannot be read or written (the models upserted before stay).
    """
    current = {model.id: model for model in await registry.list()}
    added: list[str] = []
    changed: list[str] = []
    unchanged: list[str] = []
    refused: dict[str, str] = {}
    for model in models:
        before = current.get(model.id)
        try:
            stored = await registry.upsert(model)
        except InvalidFieldError as exc:
            refused[model.id] = str(exc)
            continue
        if before is None:
            added.append(model.id)
        elif before == stored:
            unchanged.append(model.id)
        else:
            changed.append(model.id)
    return ModelImport(tuple(added), tuple(changed), tuple(unchanged), refused)


async def import_keys(key_store: ApiKeyStore, records: Sequence[ApiKeyRecord]) -> ApiKeyImport:
    """Merge a backup's key records by id and hash, so the old keys authenticate again.

    A key already here is left as it is; a record sharing only its id or only its hash with a local
    key is skipped as a conflict (see :meth:`ApiKeyStore.import_records`).

    Raises:
        ApiKeyStoreError: the key file cannot be read or written; nothing changed.
    """
    return await key_store.import_records(records)


async def import_host_services(
    store: HostServicesStore, services: HostServicesDocument
) -> HostServicesImport:
    """Merge a backup's whitelist and restart policies into the master's, the backup's winning.

    An entry is the same when it names the same container on the same node; entries and policies
    that only this master has are kept.

    Raises:
        HostServicesFileError: the file cannot be read or written; nothing changed.
    """
    outcome: list[HostServicesImport] = []

    def merge(document: HostServicesDocument) -> HostServicesDocument:
        incoming = {policy_key(c.node, c.name): c for c in services.containers}
        here = {policy_key(c.node, c.name) for c in document.containers}
        # In place where the entry was, new ones after: the Services page keeps its order.
        containers = [incoming.get(policy_key(c.node, c.name), c) for c in document.containers]
        containers += [c for key, c in incoming.items() if key not in here]
        policies = document.restart_policies
        changed_containers = tuple(key for key, c in incoming.items() if document.find(c.node, c.name) != c)
        changed_policies = tuple(k for k, p in services.restart_policies.items() if policies.get(k) != p)
        outcome.append(HostServicesImport(changed_containers, changed_policies))
        return HostServicesDocument(
            containers=containers,
            restart_policies={**document.restart_policies, **services.restart_policies},
        )

    await store.update(merge)
    return outcome[0]
