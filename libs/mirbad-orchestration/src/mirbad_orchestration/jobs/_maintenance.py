"""The maintenance state: which nodes a job holds, persisted in ``{data}/maintenance.json``.

While a job runs on a node, ``/v1`` refuses that node's models (503 ``maintenance``, with the job's
estimate as Retry-After) and the health monitor leaves them alone; other nodes keep serving. The state
goes through a :class:`~mirbad_orchestration.stores.StateFile` (one lock, atomic replace) and the file
is removed once nothing is in maintenance, so its presence alone says a job held the router. A master
that starts finds no job running, so it clears whatever a crash left (:meth:`MaintenanceState.clear_on_boot`).

The top-level ``message`` is the whole router's maintenance (every model), kept for jobs that hold
the fleet; ``nodes`` holds the per-node jobs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio
import anyio.to_thread
from pydantic import Field

from mirbad_orchestration.stores import StateFile
from mirbad_protocol import WireModel

__all__ = ["MAINTENANCE_FILE_NAME", "MaintenanceDocument", "MaintenanceState", "NodeMaintenance", "Notice"]

MAINTENANCE_FILE_NAME: Final = "maintenance.json"
"""The state file's name inside the data directory."""


class NodeMaintenance(WireModel):
    """One node held by a job.

    Attributes:
        job_id: the job.
        message: what ``/v1`` tells clients.
        retry_after_s: the job's estimate of the seconds left.
        model_ids: the node's models (the health monitor leaves them alone).
        served_names: their served names (the router refuses requests for them).
    """

    job_id: str
    message: str
    retry_after_s: int
    model_ids: list[str] = Field(default_factory=list)
    served_names: list[str] = Field(default_factory=list)


class MaintenanceDocument(WireModel):
    """The state file: the whole router's maintenance, and each node held by a job."""

    message: str | None = None
    retry_after_s: int | None = None
    model_ids: list[str] = Field(default_factory=list)
    nodes: dict[str, NodeMaintenance] = Field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Whether nothing is in maintenance."""
        return self.message is None and not self.nodes


@dataclass(frozen=True)
class Notice:
    """Why a request is refused for now, and the seconds until the job expects to end."""

    message: str
    retry_after_s: int


class MaintenanceState:
    """The maintenance state over ``{data_dir}/maintenance.json`` (see the module).

    Args:
        data_dir: the data directory.
    """

    def __init__(self, data_dir: Path) -> None:
        self._file = StateFile(data_dir / MAINTENANCE_FILE_NAME, MaintenanceDocument())
        self._document = MaintenanceDocument()
        # Serializes each change with the removal of an emptied file, which StateFile cannot do.
        self._lock = anyio.Lock()

    @property
    def path(self) -> Path:
        """The state file."""
        return self._file.path

    @property
    def document(self) -> MaintenanceDocument:
        """The state now (in memory, always what the file says)."""
        return self._document

    def clear_on_boot(self) -> bool:
        """Remove the state a previous run left behind; returns whether there was one."""
        self._document = MaintenanceDocument()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
            return True
        return False

    async def enter(self, message: str, retry_after_s: int, model_ids: Iterable[str] = ()) -> None:
        """Hold the whole router: every ``/v1`` request is refused with ``message``."""
        ids = sorted(set(model_ids))
        await self._change(
            lambda d: d.model_copy(
                update={"message": message, "retry_after_s": retry_after_s, "model_ids": ids}
            )
        )

    async def leave(self) -> None:
        """Release the whole router (per-node jobs keep their nodes)."""
        await self._change(
            lambda d: d.model_copy(update={"message": None, "retry_after_s": None, "model_ids": []})
        )

    async def enter_node(self, node_id: str, held: NodeMaintenance) -> None:
        """Hold ``node_id`` for a job."""
        await self._change(lambda d: d.model_copy(update={"nodes": {**d.nodes, node_id: held}}))

    async def update_node(self, node_id: str, retry_after_s: int) -> None:
        """A new estimate for the job holding ``node_id`` (nothing if it holds none)."""

        def change(document: MaintenanceDocument) -> MaintenanceDocument:
            held = document.nodes.get(node_id)
            if held is None:
                return document
            updated = held.model_copy(update={"retry_after_s": retry_after_s})
            return document.model_copy(update={"nodes": {**document.nodes, node_id: updated}})

        await self._change(change)

    async def leave_node(self, node_id: str) -> None:
        """Release ``node_id``."""
        await self._change(
            lambda d: d.model_copy(update={"nodes": {k: v for k, v in d.nodes.items() if k != node_id}})
        )

    def notice_for(self, served_name: str | None) -> Notice | None:
        """The notice for a request naming ``served_name`` (None: a request naming no model)."""
        document = self._document
        if document.message is not None:
            return Notice(document.message, document.retry_after_s or 1)
        if served_name is None:
            return None
        wanted = served_name.casefold()
        for held in document.nodes.values():
            if any(name.casefold() == wanted for name in held.served_names):
                return Notice(held.message, held.retry_after_s)
        return None

    def global_notice(self) -> Notice | None:
        """The whole router's notice, if it is held."""
        return self.notice_for(None)

    def owns(self, model_id: str) -> bool:
        """Whether a job in maintenance holds ``model_id``."""
        document = self._document
        if document.message is not None and model_id in document.model_ids:
            return True
        return any(model_id in held.model_ids for held in document.nodes.values())

    async def _change(self, change: Callable[[MaintenanceDocument], MaintenanceDocument]) -> None:
        async with self._lock:
            # Shielded: a job cancelled while it leaves maintenance must still leave it.
            with anyio.CancelScope(shield=True):
                changed = await self._file.update(change)
                self._document = changed
                if changed.empty:
                    await anyio.to_thread.run_sync(self._remove)

    def _remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
