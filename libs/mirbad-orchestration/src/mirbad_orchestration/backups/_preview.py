"""The restore preview: what restoring a backup would do, computed without changing anything.

A pure function over what the master has gathered: the backup, the registry's models, what the key
store would do with the backup's keys (``ApiKeyStore.import_records(..., dry_run=True)``, the same
merge a restore runs), and per model of the backup whether its folders are on its node (the agent's
model-files check) and how much is left to download (from the hub, through the node). The master asks
the stores and the nodes; this module only compares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import AwareDatetime, Field

from mirbad_orchestration.keys import ApiKeyImport
from mirbad_protocol import ModelDefinition, WireModel
from mirbad_protocol.admin import ApiKeyRecord

from ._document import BackupDocument

__all__ = ["ModelChange", "ModelPreview", "RestoreKeyPreview", "RestorePreview", "preview_restore"]

ModelChange = Literal["new", "changed", "identical"]
"""How a backup's model compares with the registry's model of the same id."""


class ModelPreview(WireModel):
    """One model of the backup.

    Attributes:
        id: the model's id.
        served_name: its served name in the backup.
        change: new here, changed (``changed_fields`` lists how), or identical.
        changed_fields: the wire names of the top-level fields that differ, in definition order.
        folders_present: whether all its folders are on its node; None when the node did not say.
        download_bytes: what is left to download for it; None when nothing is to be downloaded or
            the size is unknown.
        needs_manual_steps: its folders are not known to be there and it has no source to download
            them from: someone has to put them on the node.
    """

    id: str
    served_name: str
    change: ModelChange
    changed_fields: list[str] = Field(default_factory=list)
    folders_present: bool | None = None
    download_bytes: int | None = None
    needs_manual_steps: bool = False


class RestoreKeyPreview(WireModel):
    """An API key a restore would add (never its hash).

    Attributes:
        id: the key's id.
        name: what it is for.
        prefix: the first characters of its secret.
    """

    id: str
    name: str
    prefix: str


class RestorePreview(WireModel):
    """What restoring a backup would do.

    Attributes:
        schema_version: the backup's schema version (1: its models go to the bootstrap node).
        created_at: when the backup was written.
        host: the host that wrote it, when recorded.
        models: the backup's models, in its order.
        api_keys_included: whether the backup's keys were read (an encrypted backup, opened).
        new_api_keys: the keys a restore would add.
        conflicting_api_keys: ids of backup keys whose id or hash belongs to another key here (skipped).
    """

    schema_version: int
    created_at: AwareDatetime
    host: str | None = None
    models: list[ModelPreview] = Field(default_factory=list)
    api_keys_included: bool = False
    new_api_keys: list[RestoreKeyPreview] = Field(default_factory=list)
    conflicting_api_keys: list[str] = Field(default_factory=list)

    @property
    def manual_models(self) -> list[str]:
        """Ids of the models that need manual steps."""
        return [model.id for model in self.models if model.needs_manual_steps]

    @property
    def download_bytes(self) -> int:
        """What a restore would download in all (the known sizes)."""
        return sum(model.download_bytes or 0 for model in self.models)


def preview_restore(
    document: BackupDocument,
    *,
    current_models: Sequence[ModelDefinition],
    backup_keys: Sequence[ApiKeyRecord] = (),
    key_import: ApiKeyImport | None = None,
    folders_present: Mapping[str, bool] | None = None,
    download_sizes: Mapping[str, int] | None = None,
) -> RestorePreview:
    """Compare a backup with what is here.

    Args:
        document: the backup.
        current_models: the registry's models.
        backup_keys: the backup's key records (from its opened encrypted section).
        key_import: what the key store would do with ``backup_keys`` (its dry run); None when the
            backup's keys were not read (no passphrase, or no encrypted section).
        folders_present: per backup model id, whether all its folders are on its node (missing: unknown).
        download_sizes: per backup model id, the bytes its missing folders would download.
    """
    by_id = {model.id: model for model in current_models}
    present = folders_present or {}
    sizes = download_sizes or {}
    models = [
        _model_preview(model, by_id.get(model.id), present.get(model.id), sizes.get(model.id))
        for model in document.models
    ]
    preview = RestorePreview(
        schema_version=document.schema_version,
        created_at=document.created_at,
        host=document.host,
        models=models,
    )
    if key_import is None:
        return preview
    added = set(key_import.added)
    new_keys = [
        RestoreKeyPreview(id=key.id, name=key.name, prefix=key.prefix)
        for key in backup_keys
        if key.id in added
    ]
    update = {
        "api_keys_included": True,
        "new_api_keys": new_keys,
        "conflicting_api_keys": list(key_import.conflicts),
    }
    return preview.model_copy(update=update)


def _model_preview(
    model: ModelDefinition, current: ModelDefinition | None, present: bool | None, size: int | None
) -> ModelPreview:
    changed = _changed_fields(model, current) if current is not None else []
    change: ModelChange = "new" if current is None else "changed" if changed else "identical"
    downloadable = present is not True and bool(model.sources)
    return ModelPreview(
        id=model.id,
        served_name=model.served_name,
        change=change,
        changed_fields=changed,
        folders_present=present,
        download_bytes=size if downloadable else None,
        needs_manual_steps=present is not True and not model.sources,
    )


def _changed_fields(backup: ModelDefinition, current: ModelDefinition) -> list[str]:
    ours = current.model_dump(mode="json", by_alias=True)
    theirs = backup.model_dump(mode="json", by_alias=True)
    return [name for name in theirs if theirs[name] != ours.get(name)]
