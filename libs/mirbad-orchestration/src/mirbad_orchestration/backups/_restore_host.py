"""What a restore needs of the fleet, and the folder plan of one model.

:class:`RestoreHost` is the master's side of a restore (its stores, its nodes' agents, its start
path), so the job itself runs against a hand-written fake in the tests. :func:`folder_plan` reads one
model's folder check: which of its sources to download, and whether someone has to put its files on
the node by hand.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mirbad_orchestration.keys import ApiKeyStore
from mirbad_orchestration.registry import ModelRegistry
from mirbad_orchestration.services import HostServicesStore
from mirbad_protocol import ModelDefinition, ModelSource
from mirbad_protocol.downloads import DownloadJob, HuggingFaceDownload

__all__ = ["FolderPlan", "RestoreHost", "checked_folders", "download_request", "folder_plan"]


class RestoreHost(ABC):
    """The master's stores, nodes and start path, as a restore uses them."""

    registry: ModelRegistry
    keys: ApiKeyStore
    host_services: HostServicesStore

    @abstractmethod
    def node_of(self, definition: ModelDefinition) -> str:
        """The node the model's folders are on and it starts on (its placement, else the default)."""

    @abstractmethod
    async def models_changed(self) -> None:
        """Refresh what derives from the registry (served names, idle times) after the upsert."""

    @abstractmethod
    async def folders_present(self, node_id: str, paths: Sequence[str]) -> Mapping[str, bool] | None:
        """Per path (relative to a model root), whether the node has it; None when it cannot say."""

    @abstractmethod
    async def start_download(self, node_id: str, request: HuggingFaceDownload, actor: str) -> DownloadJob:
        """Start a download on the node (audited as ``actor``'s)."""

    @abstractmethod
    async def download(self, node_id: str, download_id: str) -> DownloadJob:
        """A download's progress."""

    @abstractmethod
    async def cancel_download(self, node_id: str, download_id: str, actor: str) -> None:
        """Stop a download in flight (audited)."""

    @abstractmethod
    async def start_model(self, model_id: str, actor: str) -> None:
        """Start the model through the master's start path (audited).

        Raises:
            AgentStartConflictError: another start holds the node (a restore retries).
            StartLaneBusyError: likewise, on the master's side.
            AgentAdmissionRefusedError: its memory budget does not fit (the model is left stopped).
        """


@dataclass(frozen=True)
class FolderPlan:
    """What one model's folder check means for a restore.

    Attributes:
        downloads: the sources whose folder is missing, in the model's order.
        manual: a path it needs is missing and no source can bring it.
    """

    downloads: tuple[ModelSource, ...] = ()
    manual: bool = False


def checked_folders(definition: ModelDefinition) -> list[str]:
    """The paths whose presence says the model can start: its ``modelPath`` and each source's folder."""
    return list(dict.fromkeys([definition.model_path, *(source.folder for source in definition.sources)]))


def folder_plan(definition: ModelDefinition, present: Mapping[str, bool]) -> FolderPlan:
    """Which sources to download for ``definition``, given its node's answer ``present``."""
    downloads = tuple(source for source in definition.sources if not present.get(source.folder, False))
    first = definition.model_path.replace("\\", "/").split("/", 1)[0]
    covered = any(source.folder in (definition.model_path, first) for source in definition.sources)
    manual = not present.get(definition.model_path, False) and not covered
    return FolderPlan(downloads, manual)


def download_request(source: ModelSource) -> HuggingFaceDownload:
    """The node download that brings ``source``'s folder back (into the first model root)."""
    return HuggingFaceDownload(
        repo_id=source.repo_id,
        revision=source.revision or "main",
        allow_patterns=list(source.allow_patterns),
        folder=source.folder,
    )
