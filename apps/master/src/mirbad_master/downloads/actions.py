"""The master's side of model downloads, shared by the admin API and the portal.

A start asks the node's agent for its feature flags first (fresh: the monitor's cached info may
predate an agent upgrade) and refuses a node without the kind's flag before the agent is asked; a
start (refused ones too, with outcome ``refused``), cancel, retry and removal each write an audit line.
A token is forwarded to the agent and never logged, audited nor returned. A download id is checked
here, before it is put in an agent's path (a ``%0A`` or ``..`` never reaches the node).
"""

from __future__ import annotations

from typing import Final

from mirbad_master._composition import MasterServices
from mirbad_master._download_start import DOWNLOAD_FEATURES
from mirbad_master._download_start import start_download as start_checked_download
from mirbad_protocol import InvalidFieldError
from mirbad_protocol.agent import AgentInfo
from mirbad_protocol.downloads import DownloadJob, HuggingFaceDownload, OllamaDownload, check_download_id

__all__ = [
    "DOWNLOAD_FEATURES",
    "RETRYABLE_STATES",
    "STOPPABLE_STATES",
    "cancel_download",
    "checked_download_id",
    "download_kinds",
    "node_download",
    "node_downloads",
    "retry_download",
    "start_download",
]

STOPPABLE_STATES: Final = ("queued", "running", "verifying")
"""The states a cancel stops."""
RETRYABLE_STATES: Final = ("failed", "cancelled")
"""The states a retry runs again."""


def checked_download_id(download_id: str) -> str:
    """``download_id`` if it has the agent's shape (``dl-`` and 12 hex digits).

    Raises:
        InvalidFieldError: anything else, naming ``downloadId``.
    """
    try:
        return check_download_id(download_id)
    except ValueError as exc:
        raise InvalidFieldError("downloadId", str(exc)) from None


def download_kinds(info: AgentInfo | None) -> list[str]:
    """The download kinds (``huggingface``, ``ollama``) a node's agent offers, by its feature flags."""
    if info is None:
        return []
    return [kind for kind, feature in DOWNLOAD_FEATURES.items() if feature in info.features]


async def start_download(
    services: MasterServices, node_id: str, request: HuggingFaceDownload | OllamaDownload, actor: str
) -> DownloadJob:
    """Start ``request`` on ``node_id``'s agent, its feature checked first, and audit it (refused too).

    Raises:
        UnknownNodeError: no such node.
        NodeFeatureMissingError: the node's agent does not report the kind's feature flag.
        AgentRequestError: the agent refused (its code and field kept: ``source_not_found`` ...).
    """
    return await start_checked_download(services, node_id, request, actor)


async def node_downloads(services: MasterServices, node_id: str) -> list[DownloadJob]:
    """The node's download jobs, newest first, with their progress."""
    return await (await services.client_of(node_id)).downloads()


async def node_download(services: MasterServices, node_id: str, download_id: str) -> DownloadJob:
    """One of the node's download jobs with its per-file and overall progress.

    Raises:
        InvalidFieldError: ``downloadId`` is not a download id.
        UnknownNodeError: no such node.
        AgentRequestError: ``download_not_found``, or another refusal of the agent.
    """
    checked_download_id(download_id)
    return await (await services.client_of(node_id)).download(download_id)


async def cancel_download(
    services: MasterServices, node_id: str, download_id: str, actor: str, *, remove: bool = False
) -> DownloadJob:
    """Stop a queued or running job (audited); with ``remove`` also delete its partial files.

    Returns:
        The job as it was left (cancelled, or as it was when it had stopped already).

    Raises:
        UnknownNodeError: no such node.
        AgentRequestError: ``download_not_found``, or another refusal of the agent.
    """
    checked_download_id(download_id)
    client = await services.client_of(node_id)
    job = await client.download(download_id)
    if job.state in STOPPABLE_STATES:
        job = await client.cancel_download(download_id)
        await services.audit.record(actor, "download.cancel", download_id, node_id=node_id, detail=job.source)
    if remove:
        await client.remove_download(download_id)
        await services.audit.record(actor, "download.remove", download_id, node_id=node_id, detail=job.source)
    return job


async def retry_download(services: MasterServices, node_id: str, download_id: str, actor: str) -> DownloadJob:
    """Run a failed or cancelled job again, from the verified bytes on the node's disk (audited).

    Raises:
        InvalidFieldError: ``downloadId`` is not a download id.
        UnknownNodeError: no such node.
        AgentRequestError: ``download_not_found``, ``download_conflict`` (field ``state``: the job has not
            stopped), ``insufficient_space``, or another refusal of the agent.
    """
    checked_download_id(download_id)
    client = await services.client_of(node_id)
    job = await client.retry_download(download_id)
    await services.audit.record(actor, "download.retry", download_id, node_id=node_id, detail=job.source)
    return job
