"""What restoring a backup would do, gathered from this master's stores and its nodes.

Read only: the registry's models, the key store's dry run of the backup's keys, each model's folders
as its node's model-files check answers, and the download size of each missing folder that has a
source, as the node's agent reads it from the hub (``downloads.size``). The nodes are asked side by
side; a node that cannot tell a size (no such feature, a hub that refuses or does not answer in time)
leaves that model's size unknown and says why in the preview's notes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import anyio

from mirbad_master._composition import MasterServices
from mirbad_master._restore_host import MasterRestoreHost
from mirbad_orchestration.backups import (
    Backup,
    backup_models,
    checked_folders,
    download_request,
    folder_plan,
    preview_restore,
)
from mirbad_orchestration.keys import ApiKeyImport
from mirbad_protocol import MirbadError, ModelDefinition
from mirbad_protocol.admin import ApiKeyRecord
from mirbad_protocol.agent import FeatureFlag
from mirbad_protocol.downloads import HuggingFaceDownload
from mirbad_protocol.restore import RestorePreview

__all__ = ["DOWNLOAD_SIZE_WAIT_S", "gather_preview"]

DOWNLOAD_SIZE_WAIT_S: Final = 20.0
"""How long a node may take to tell one folder's download size (then the size is unknown)."""

_Answers = dict[str, Mapping[str, bool] | None]


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
    host = MasterRestoreHost(services)
    models = backup_models(backup.document, bootstrap_node_id=services.settings.default_node)
    answers = await _folder_answers(host, models)
    present = _present(host, models, answers)
    sizes, size_notes = await _download_sizes(services, host, models, answers)
    # Compared as the restore would store them: a version 1 backup's models on the bootstrap node.
    document = backup.document.model_copy(update={"models": models})
    preview = preview_restore(
        document,
        current_models=await services.models.list(),
        backup_keys=keys or (),
        key_import=key_import,
        folders_present=present,
        download_sizes=sizes,
    )
    silent = sorted(node_id for node_id, answer in answers.items() if answer is None)
    notes = [f"node {node_id!r} did not say whether the models' folders are there" for node_id in silent]
    notes += size_notes
    if not backup.encrypted:
        notes.append("the backup has no encrypted section: it restores no API keys")
    elif keys is None:
        notes.append("no passphrase given: the backup's API keys are not read")
    return preview.model_copy(update={"notes": notes})


async def _folder_answers(host: MasterRestoreHost, models: list[ModelDefinition]) -> _Answers:
    by_node: dict[str, list[ModelDefinition]] = {}
    for model in models:
        by_node.setdefault(host.node_of(model), []).append(model)
    answers: _Answers = {}

    async def ask(node_id: str, definitions: list[ModelDefinition]) -> None:
        paths = list(dict.fromkeys(path for d in definitions for path in checked_folders(d)))
        answers[node_id] = await host.folders_present(node_id, paths)

    async with anyio.create_task_group() as tasks:
        for node_id, definitions in by_node.items():
            tasks.start_soon(ask, node_id, definitions)
    return answers


def _present(host: MasterRestoreHost, models: list[ModelDefinition], answers: _Answers) -> dict[str, bool]:
    present: dict[str, bool] = {}
    for model in models:
        answer = answers[host.node_of(model)]
        if answer is not None:
            present[model.id] = all(answer.get(path, False) for path in checked_folders(model))
    return present


async def _download_sizes(
    services: MasterServices, host: MasterRestoreHost, models: list[ModelDefinition], answers: _Answers
) -> tuple[dict[str, int], list[str]]:
    """Per model with missing folders to download, their total size; and why a size is unknown."""
    wanted: list[tuple[str, str, HuggingFaceDownload]] = []
    for model in models:
        node_id = host.node_of(model)
        answer = answers[node_id]
        if answer is not None:
            wanted += [(model.id, node_id, download_request(s)) for s in folder_plan(model, answer).downloads]
    told: list[int | str | None] = [None] * len(wanted)

    async def ask(index: int, node_id: str, request: HuggingFaceDownload) -> None:
        told[index] = await _download_size(services, node_id, request)

    async with anyio.create_task_group() as tasks:
        for index, (_, node_id, request) in enumerate(wanted):
            tasks.start_soon(ask, index, node_id, request)
    totals: dict[str, int] = {}
    unknown: dict[str, str] = {}
    for (model_id, _, _), size in zip(wanted, told, strict=True):
        if isinstance(size, int):
            totals[model_id] = totals.get(model_id, 0) + size
        else:
            unknown.setdefault(model_id, size or "no answer")
    notes = [f"download sizes are unknown for model {model_id!r}: {why}" for model_id, why in unknown.items()]
    return {model_id: total for model_id, total in totals.items() if model_id not in unknown}, notes


async def _download_size(services: MasterServices, node_id: str, request: HuggingFaceDownload) -> int | str:
    """The bytes ``request`` would fetch, as the node's agent reads them from the hub; else why not."""
    try:
        with anyio.fail_after(DOWNLOAD_SIZE_WAIT_S):
            client = await services.client_of(node_id)
            if FeatureFlag.DOWNLOADS_SIZE.value not in (await client.info()).features:
                flag = FeatureFlag.DOWNLOADS_SIZE.value
                return f"node {node_id!r} does not tell download sizes (its agent has no {flag})"
            return (await client.download_size(request)).total_bytes
    except TimeoutError:
        return f"node {node_id!r} did not tell the size of {request.source} within {DOWNLOAD_SIZE_WAIT_S:g} s"
    except MirbadError as exc:
        return f"node {node_id!r} could not tell the size of {request.source}: {exc}"
