"""Which models each node should be running: ``{data_dir}/running-models.json``.

A model enters its node's set when the master starts it (by hand or on its own) and leaves it only when
someone stops it explicitly. What is listed but not running therefore crashed or was lost with its
node, and the health monitor brings it back. Each node's entry also remembers the node's boot id as
last seen, so a master that starts after its nodes rebooted still knows their models are gone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal

from pydantic import Field

from mirbad_orchestration.stores import StateFile
from mirbad_protocol import WireModel
from mirbad_protocol.support import BeforeReplace

__all__ = ["RECOVERY_FILE_NAME", "RecoveryState"]

RECOVERY_FILE_NAME: Final = "running-models.json"
"""The recovery state's file name inside the data directory."""


class _NodeRecord(WireModel):
    boot_id: str | None = None
    models: tuple[str, ...] = ()


class _RecoveryDocument(WireModel):
    version: Literal[1] = 1
    nodes: dict[str, _NodeRecord] = Field(default_factory=dict)

    def with_node(self, node_id: str, record: _NodeRecord) -> _RecoveryDocument:
        nodes = {**self.nodes, node_id: record}
        if record == _NodeRecord():
            del nodes[node_id]  # an entry with nothing to say is not kept
        return _RecoveryDocument(nodes=dict(sorted(nodes.items())))


class RecoveryState:
    """The models started and never explicitly stopped, per node, persisted atomically.

    Args:
        data_dir: the data directory; the file is ``data_dir / "running-models.json"``.
        before_replace: test seam (see :func:`mirbad_protocol.support.write_json_atomic`): raising there makes
            a write fail, as on a full disk.
    """

    def __init__(self, data_dir: Path, *, before_replace: BeforeReplace | None = None) -> None:
        self._file = StateFile(
            data_dir / RECOVERY_FILE_NAME, _RecoveryDocument(), before_replace=before_replace
        )

    @property
    def path(self) -> Path:
        """The recovery file."""
        return self._file.path

    async def running(self, node_id: str) -> frozenset[str]:
        """The ids of the models ``node_id`` should be running."""
        record = (await self._file.read()).nodes.get(node_id, _NodeRecord())
        return frozenset(record.models)

    async def snapshot(self) -> dict[str, list[str]]:
        """Every node's listed models (sorted), for display and diagnostics."""
        return {node: list(record.models) for node, record in (await self._file.read()).nodes.items()}

    async def add(self, node_id: str, model_id: str) -> None:
        """List ``model_id`` as running on ``node_id`` (a start), and on no other node.

        Raises:
            StateFileError: the file could not be written.
        """

        def change(document: _RecoveryDocument) -> _RecoveryDocument:
            document = _without(document, model_id, keep=node_id)
            record = document.nodes.get(node_id, _NodeRecord())
            models = tuple(sorted({*record.models, model_id}))
            return document.with_node(node_id, record.model_copy(update={"models": models}))

        await self._file.update(change)

    async def remove(self, model_id: str, *, node_id: str | None = None) -> None:
        """Forget ``model_id`` on ``node_id``, or on every node when ``None`` (an explicit stop).

        Raises:
            StateFileError: the file could not be written.
        """

        def change(document: _RecoveryDocument) -> _RecoveryDocument:
            if node_id is None:
                return _without(document, model_id)
            record = document.nodes.get(node_id, _NodeRecord())
            models = tuple(m for m in record.models if m != model_id)
            return document.with_node(node_id, record.model_copy(update={"models": models}))

        await self._file.update(change)

    async def boot_id(self, node_id: str) -> str | None:
        """The boot id ``node_id`` had when last seen, or ``None`` when never recorded."""
        return (await self._file.read()).nodes.get(node_id, _NodeRecord()).boot_id

    async def set_boot_id(self, node_id: str, boot_id: str | None) -> None:
        """Record the boot id ``node_id`` has now.

        Raises:
            StateFileError: the file could not be written.
        """

        def change(document: _RecoveryDocument) -> _RecoveryDocument:
            record = document.nodes.get(node_id, _NodeRecord())
            return document.with_node(node_id, record.model_copy(update={"boot_id": boot_id}))

        await self._file.update(change)


def _without(document: _RecoveryDocument, model_id: str, *, keep: str | None = None) -> _RecoveryDocument:
    for node_id, record in list(document.nodes.items()):
        if node_id != keep and model_id in record.models:
            models = tuple(m for m in record.models if m != model_id)
            document = document.with_node(node_id, record.model_copy(update={"models": models}))
    return document
