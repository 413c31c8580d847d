"""What restoring a backup would do, gathered from this master's stores and its nodes.

Read only: the registry's models, the key store's dry run of the backup's keys, and each model's
folders as its node's model-files check answers. The nodes are asked side by side, one request each.
Download sizes would come from the hub through the node, but no agent offers the hub's sizes yet,
so the preview says they are unknown rather than guessing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import anyio

from mirbad_master._composition import MasterServices
from mirbad_master._restore_host import MasterRestoreHost
from mirbad_orchestration.backups import Backup, backup_models, checked_folders, preview_restore
from mirbad_orchestration.keys import ApiKeyImport
from mirbad_protocol import ModelDefinition
from mirbad_protocol.admin import ApiKeyRecord
from mirbad_protocol.restore import RestorePreview

__all__ = ["SIZES_UNKNOWN", "gather_preview"]

SIZES_UNKNOWN = (
    "download sizes are unknown: no node's agent tells the hub's repository sizes yet; "
    "the restore job shows each download's size once it starts"
)
"""The preview's note when a folder is to be downloaded."""


async def gather_preview(
    services: MasterServices,
    backup: Backup,
    keys: Sequence[ApiKeyRecord] | None = None,
    key_import: ApiKeyImport | None = None,
) -> RestorePreview:
    """The preview of restoring ``backup``.

    Args:
        services: the master's services.
        backup: the backup.
        keys: its opened API key records; None when they were not read (no passphrase).
        key_import: what the key store would do with ``keys`` (its dry run).
    """
    models = backup_models(backup.document, bootstrap_node_id=services.settings.default_node)
    present, silent = await _folders_present(services, models)
    # Compared as the restore would store them: a version 1 backup's models on the bootstrap node.
    document = backup.document.model_copy(update={"models": models})
    preview = preview_restore(
        document,
        current_models=await services.models.list(),
        backup_keys=keys or (),
        key_import=key_import,
        folders_present=present,
    )
    notes = [f"node {node_id!r} did not say whether the models' folders are there" for node_id in silent]
    if any(model.folders_present is False and not model.needs_manual_steps for model in preview.models):
        notes.append(SIZES_UNKNOWN)
    if not backup.encrypted:
        notes.append("the backup has no encrypted section: it restores no API keys")
    elif keys is None:
        notes.append("no passphrase given: the backup's API keys are not read")
    return preview.model_copy(update={"notes": notes})


async def _folders_present(
    services: MasterServices, models: list[ModelDefinition]
) -> tuple[dict[str, bool], list[str]]:
    host = MasterRestoreHost(services)
    by_node: dict[str, list[ModelDefinition]] = {}
    for model in models:
        by_node.setdefault(host.node_of(model), []).append(model)
    answers: dict[str, Mapping[str, bool] | None] = {}

    async def ask(node_id: str, definitions: list[ModelDefinition]) -> None:
        paths = list(dict.fromkeys(path for d in definitions for path in checked_folders(d)))
        answers[node_id] = await host.folders_present(node_id, paths)

    async with anyio.create_task_group() as tasks:
        for node_id, definitions in by_node.items():
            tasks.start_soon(ask, node_id, definitions)
    present: dict[str, bool] = {}
    for node_id, definitions in by_node.items():
        answer = answers[node_id]
        if answer is not None:
            for model in definitions:
                present[model.id] = all(answer.get(path, False) for path in checked_folders(model))
    return present, sorted(node_id for node_id, answer in answers.items() if answer is None)
