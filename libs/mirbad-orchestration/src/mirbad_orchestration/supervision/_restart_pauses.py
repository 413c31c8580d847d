"""Paused automatic restarts: ``{data_dir}/restart-pauses.json``.

When a model crashes too many times in a row the health monitor stops restarting it and records a
pause here, so the model stays down across a master restart and the UI can say why. A start by hand,
or the model staying Ready long enough, clears the pause.
"""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Final, Literal

from mirbad_orchestration.stores import StateFile
from mirbad_protocol import WireModel
from mirbad_protocol.admin import RestartPause

__all__ = ["RESTART_PAUSES_FILE_NAME", "RestartPause", "RestartPauses"]

RESTART_PAUSES_FILE_NAME: Final = "restart-pauses.json"
"""The pause file's name inside the data directory."""


class _PausesDocument(WireModel):
    version: Literal[1] = 1
    pauses: tuple[RestartPause, ...] = ()

    def without(self, model_id: str) -> _PausesDocument:
        return _PausesDocument(pauses=tuple(p for p in self.pauses if p.model_id != model_id))


class RestartPauses:
    """The paused models, one pause per model id, persisted atomically.

    Args:
        data_dir: the data directory; the file is ``data_dir / "restart-pauses.json"``.
    """

    def __init__(self, data_dir: Path) -> None:
        self._file = StateFile(data_dir / RESTART_PAUSES_FILE_NAME, _PausesDocument())

    @property
    def path(self) -> Path:
        """The pause file."""
        return self._file.path

    async def list(self) -> builtins.list[RestartPause]:
        """Every pause, in model-id order."""
        return [*(await self._file.read()).pauses]

    async def get(self, model_id: str) -> RestartPause | None:
        """The pause of ``model_id``, or ``None`` when its restarts are not paused."""
        return next((p for p in (await self._file.read()).pauses if p.model_id == model_id), None)

    async def pause(self, pause: RestartPause) -> None:
        """Record ``pause``, replacing any earlier pause of the same model.

        Raises:
            StateFileError: the file could not be written.
        """

        def change(document: _PausesDocument) -> _PausesDocument:
            pauses = sorted([*document.without(pause.model_id).pauses, pause], key=lambda p: p.model_id)
            return _PausesDocument(pauses=tuple(pauses))

        await self._file.update(change)

    async def clear(self, model_id: str) -> RestartPause | None:
        """Remove the pause of ``model_id`` and return it (``None`` when there was none).

        Raises:
            StateFileError: the file could not be written.
        """
        removed = await self.get(model_id)
        if removed is not None:
            await self._file.update(lambda document: document.without(model_id))
        return removed
