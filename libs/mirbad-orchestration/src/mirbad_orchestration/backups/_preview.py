"""The restore preview: what restoring a backup would do, computed without changing anything.

A pure function over what the master has gathered: the backup, the registry's models, what the key
store would do with the backup's keys (``ApiKeyStore.import_records(..., dry_run=True)``, the same
merge a restore runs), and per model of the backup whether its folders are on its node (the agent's
model-files check) and how much is left to download (from the hub, through the node). The master asks
the stores and the nodes; this module only compares. The preview's wire models are
:mod:`mirbad_protocol.restore`'s (the admin API and its typed client carry them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mirbad_orchestration.keys import ApiKeyImport
from mirbad_protocol import ModelDefinition
from mirbad_protocol.admin import ApiKeyRecord
from mirbad_protocol.restore import ModelChange, ModelPreview, RestoreKeyPreview, RestorePreview

from ._document import BackupDocument

__all__ = ["preview_restore"]


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
