"""Whether a saved model's files are on its node, known before anyone presses Start.

The agent checks a launch's ``modelPath`` only when the model starts (409 ``model_files_missing``); the
Models page asks first, so a card can say which path is missing and offer to download it. One request
per node (``POST /agent/v1/model-files``) carries every stopped model's paths: its ``modelPath`` and
the folders of its extra sources. The nodes are asked at the same time (at most
:data:`MODEL_FILES_CONCURRENCY` at once), each within its own wait, so a slow node costs the page one
wait, not one per node. A node whose agent does not report
:attr:`~mirbad_protocol.agent.FeatureFlag.MODEL_FILES`, or that does not answer, is not asked or not
counted: a card without the note is what the portal showed before, never a false "missing".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import anyio

from mirbad_master._composition import MasterServices
from mirbad_protocol import MirbadError, ModelDefinition, ModelSource, ModelState
from mirbad_protocol.admin import ModelView
from mirbad_protocol.agent import FeatureFlag

__all__ = [
    "MODEL_FILES_CONCURRENCY",
    "MODEL_FILES_WAIT_S",
    "MissingFiles",
    "checked_paths",
    "missing_model_files",
    "primary_source",
]

logger = logging.getLogger(__name__)

MODEL_FILES_WAIT_S: Final = 3.0
"""How long the page waits for one node's answer: a slow node must not hold up the Models page."""
MODEL_FILES_CONCURRENCY: Final = 8
"""How many nodes are asked at once (a large fleet is not sent a burst of requests on every refresh)."""

_RUNNING = (ModelState.STARTING, ModelState.READY)


@dataclass(frozen=True)
class MissingFiles:
    """What of one model is not on its node.

    Attributes:
        node_id: the node the model starts on.
        paths: the missing paths, relative to a model root, the ``modelPath`` first.
    """

    node_id: str
    paths: list[str]


def primary_source(definition: ModelDefinition) -> ModelSource | None:
    """The source holding the ``modelPath``: its folder is the path, or the path's first segment."""
    first = definition.model_path.replace("\\", "/").split("/", 1)[0]
    for source in definition.sources:
        if source.folder in (definition.model_path, first):
            return source
    return None


def checked_paths(definition: ModelDefinition) -> list[str]:
    """The paths a start needs: the ``modelPath`` (a folder, or a GGUF file) and each extra folder."""
    primary = primary_source(definition)
    extra = [source.folder for source in definition.sources if source is not primary]
    return list(dict.fromkeys([definition.model_path, *extra]))


async def missing_model_files(
    services: MasterServices, views: Sequence[ModelView], *, wait_s: float = MODEL_FILES_WAIT_S
) -> dict[str, MissingFiles]:
    """The models of ``views`` with a path missing on their node, by model id.

    Running models are not asked about (their files were there when they started); a node that cannot
    say (unreachable at the last poll, no answer within ``wait_s``, a refusal) is left out.
    """
    by_node: dict[str, list[ModelDefinition]] = {}
    for view in views:
        if view.status.state not in _RUNNING:
            node_id = view.status.node_id or services.runtime.node_for(view.definition)
            by_node.setdefault(node_id, []).append(view.definition)
    absent: dict[str, set[str]] = {}
    limiter = anyio.CapacityLimiter(MODEL_FILES_CONCURRENCY)

    async def ask(node_id: str, definitions: list[ModelDefinition]) -> None:
        async with limiter:
            absent[node_id] = await _absent_on(services, node_id, definitions, wait_s)

    async with anyio.create_task_group() as tasks:
        for node_id, definitions in by_node.items():
            tasks.start_soon(ask, node_id, definitions)
    missing: dict[str, MissingFiles] = {}
    for node_id, definitions in by_node.items():
        for definition in definitions:
            paths = [path for path in checked_paths(definition) if path in absent[node_id]]
            if paths:
                missing[definition.id] = MissingFiles(node_id, paths)
    return missing


async def _absent_on(
    services: MasterServices, node_id: str, definitions: list[ModelDefinition], wait_s: float
) -> set[str]:
    state = services.cache.node(node_id)
    if state is None or not state.reachable or state.info is None:
        return set()
    if FeatureFlag.MODEL_FILES.value not in state.info.features:
        return set()
    paths = list(dict.fromkeys(path for definition in definitions for path in checked_paths(definition)))
    files = None
    try:
        client = await services.client_of(node_id)
        with anyio.move_on_after(wait_s):
            files = await client.model_files(paths)
    except MirbadError as exc:
        # The page refreshes every few seconds: an unreachable node is said elsewhere, so debug only.
        logger.debug("node %s could not say which model files it has: %s", node_id, exc)
        return set()
    if files is None:
        logger.debug("node %s did not say within %s s which model files it has", node_id, wait_s)
        return set()
    return {file.path for file in files if not file.present}
