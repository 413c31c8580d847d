"""Maintenance mode: while a job owns models, ``/v1`` answers 503 ``maintenance`` to every request.

The flag is ``{data_dir}/maintenance.json``, written when a job enters maintenance and removed when it
leaves. A master that starts finds no job running, so it clears a flag left behind by a crash before it
serves anything. ``/healthz``, ``/metrics``, ``/api`` and the portal keep working throughout, and the
health monitor leaves the job's models alone (:meth:`MaintenanceMode.owns`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import anyio.to_thread

from mirbad_protocol import write_json_atomic
from mirbad_router import MaintenanceGate, MaintenanceNotice

__all__ = ["MAINTENANCE_FILE_NAME", "MaintenanceMode"]

MAINTENANCE_FILE_NAME: Final = "maintenance.json"
"""The flag file's name inside the data directory."""


class MaintenanceMode(MaintenanceGate):
    """The router's maintenance gate, with the flag a job raises and lowers.

    Args:
        data_dir: the data directory holding the flag file.
    """

    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / MAINTENANCE_FILE_NAME
        self._notice: MaintenanceNotice | None = None
        self._models: frozenset[str] = frozenset()

    @property
    def path(self) -> Path:
        """The flag file."""
        return self._path

    def clear_on_boot(self) -> bool:
        """Remove a flag a previous run left behind; returns whether there was one."""
        self._notice, self._models = None, frozenset()
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
            return True
        return False

    async def enter(self, message: str, retry_after_s: int, model_ids: Iterable[str] = ()) -> None:
        """Refuse ``/v1`` from now on with ``message``; the monitor leaves ``model_ids`` alone."""
        models = frozenset(model_ids)
        document = {"message": message, "retryAfterS": retry_after_s, "modelIds": sorted(models)}
        await anyio.to_thread.run_sync(lambda: write_json_atomic(self._path, document, mode=0o644))
        self._notice, self._models = MaintenanceNotice(message, retry_after_s), models

    async def leave(self) -> None:
        """Serve ``/v1`` again."""
        self._notice, self._models = None, frozenset()
        await anyio.to_thread.run_sync(self._remove)

    async def current(self) -> MaintenanceNotice | None:
        """The notice while maintenance lasts, else None."""
        return self._notice

    def owns(self, model_id: str, node_id: str) -> bool:
        """Whether a job in maintenance owns ``model_id`` (the health monitor's skip check)."""
        return self._notice is not None and model_id in self._models

    def _remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
