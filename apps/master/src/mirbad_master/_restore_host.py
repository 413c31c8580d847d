"""The master's side of a restore: :class:`~mirbad_orchestration.backups.RestoreHost` over its services.

The folder check is the agent's model-files check (``POST /agent/v1/model-files``), asked fresh of
the node; downloads go through the node's agent as the downloads room's do (the same audit lines, the
feature flag checked first); starts go through the master's one start path (lanes, audit, the
llama-server build gate), as a start by hand does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

import anyio

from mirbad_orchestration.backups import RestoreHost
from mirbad_protocol import MirbadError, ModelDefinition
from mirbad_protocol.agent import FeatureFlag
from mirbad_protocol.downloads import DownloadJob, HuggingFaceDownload

from ._download_start import start_download
from ._llama_server_build import refuse_llamacpp_start

if TYPE_CHECKING:
    from ._composition import MasterServices

__all__ = ["FOLDER_CHECK_WAIT_S", "MasterRestoreHost"]

FOLDER_CHECK_WAIT_S: Final = 10.0
"""How long a node may take to say which folders it has (then it counts as not saying)."""


class MasterRestoreHost(RestoreHost):
    """The registry, key store and host services of ``services``, and its nodes' agents.

    Args:
        services: the master's services (read when a restore runs, not when this is made).
    """

    def __init__(self, services: MasterServices) -> None:
        self._services = services
        self.registry = services.models
        self.keys = services.keys
        self.host_services = services.host_services_store

    def node_of(self, definition: ModelDefinition) -> str:
        """The model's placement, else the fleet's default node."""
        return self._services.runtime.node_for(definition)

    async def models_changed(self) -> None:
        """Refresh the served names and idle times the registry feeds."""
        await self._services.sync_models()

    async def folders_present(self, node_id: str, paths: Sequence[str]) -> Mapping[str, bool] | None:
        """The node's model-files answer; None when it lacks the check, does not answer or refuses."""
        try:
            with anyio.fail_after(FOLDER_CHECK_WAIT_S):
                client = await self._services.client_of(node_id)
                if FeatureFlag.MODEL_FILES.value not in (await client.info()).features:
                    return None
                files = await client.model_files(list(paths))
        except (MirbadError, TimeoutError):
            return None
        return {file.path: file.present for file in files}

    async def start_download(self, node_id: str, request: HuggingFaceDownload, actor: str) -> DownloadJob:
        """Start the download on the node's agent (its hub feature checked first) and audit it."""
        return await start_download(self._services, node_id, request, actor)

    async def download(self, node_id: str, download_id: str) -> DownloadJob:
        """The download's progress, from the node's agent."""
        return await (await self._services.client_of(node_id)).download(download_id)

    async def cancel_download(self, node_id: str, download_id: str, actor: str) -> None:
        """Stop the download on the node's agent and audit it."""
        job = await (await self._services.client_of(node_id)).cancel_download(download_id)
        await self._services.audit.record(
            actor, "download.cancel", download_id, node_id=node_id, detail=job.source
        )

    async def start_model(self, model_id: str, actor: str) -> None:
        """Start the model as a start by hand does (audited by the start path)."""
        services = self._services
        definition = await services.models.get(model_id)
        refuse_llamacpp_start(services.llama_server_build, definition, services.runtime.node_for(definition))
        await services.control.start(definition, actor=actor)
