"""Starting a download on a node, checked and audited: the one start the downloads room and a restore share.

The node's agent is asked for its feature flags first (fresh: the monitor's cached info may predate an
agent upgrade), and a node without the kind's flag is refused before the agent is asked. Every start is
audited, a refused one too (outcome ``refused``: who tried to put what onto which node, and why). The
audit line names the source, root and folder only: a request's token never reaches the log.

It sits at the master's root, beside the composition, because the composition's restore host starts
downloads too and may import no room.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Final, Protocol

from mirbad_orchestration import NodeFeatureMissingError
from mirbad_orchestration.fleet import AgentClient
from mirbad_orchestration.stores import AuditLog
from mirbad_protocol import MirbadError
from mirbad_protocol.agent import FeatureFlag
from mirbad_protocol.downloads import DownloadJob, HuggingFaceDownload, OllamaDownload

__all__ = ["DOWNLOAD_FEATURES", "DownloadStarter", "start_download"]

DOWNLOAD_FEATURES: Final = {
    "huggingface": FeatureFlag.DOWNLOADS_HF_NATIVE.value,
    "ollama": FeatureFlag.DOWNLOADS_OLLAMA.value,
}
"""The feature flag a node's agent must report for each download kind."""


class DownloadStarter(Protocol):
    """What a start needs of the master's services: its agents and its audit log."""

    @property
    def audit(self) -> AuditLog: ...

    def client_of(self, node_id: str) -> Awaitable[AgentClient]: ...


async def start_download(
    services: DownloadStarter, node_id: str, request: HuggingFaceDownload | OllamaDownload, actor: str
) -> DownloadJob:
    """Start ``request`` on ``node_id``'s agent and audit it (see the module).

    Raises:
        UnknownNodeError: no such node.
        NodeFeatureMissingError: the node's agent does not report the kind's feature flag.
        AgentRequestError: the agent refused (its code and field kept: ``source_not_found`` ...).
    """
    detail = f"{request.kind} {request.source} into root {request.root} folder {request.folder}"
    try:
        client = await services.client_of(node_id)
        feature = DOWNLOAD_FEATURES[request.kind]
        if feature not in (await client.info()).features:
            raise NodeFeatureMissingError(node_id, feature)
        job = await client.start_download(request)
    except MirbadError as exc:
        await services.audit.record(
            actor,
            "download.start",
            request.source,
            outcome="refused",
            node_id=node_id,
            detail=f"{detail}: {exc}",
        )
        raise
    await services.audit.record(actor, "download.start", job.id, node_id=node_id, detail=detail)
    return job
