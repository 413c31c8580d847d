"""Maintenance mode: the router's gate over the jobs' maintenance state.

The state is :class:`~mirbad_orchestration.jobs.MaintenanceState` (``{data_dir}/maintenance.json``,
cleared at boot): a job on one node holds that node's models, so ``/v1`` answers 503 ``maintenance``
for them (before the key check) while other nodes keep serving; :meth:`MaintenanceMode.enter` holds
the whole router. ``/healthz``, ``/metrics``, ``/api`` and the portal keep working throughout, and the
health monitor leaves held models alone (:meth:`MaintenanceMode.owns`).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from mirbad_orchestration.jobs import MAINTENANCE_FILE_NAME, MaintenanceState, Notice
from mirbad_router import MaintenanceGate, MaintenanceNotice

__all__ = ["MAINTENANCE_FILE_NAME", "MaintenanceMode"]


class MaintenanceMode(MaintenanceGate):
    """The router's maintenance gate, with the state jobs raise and lower.

    Args:
        data_dir: the data directory holding the state file.

    Attributes:
        state: the maintenance state the jobs change.
    """

    def __init__(self, data_dir: Path) -> None:
        self.state = MaintenanceState(data_dir)

    @property
    def path(self) -> Path:
        """The state file."""
        return self.state.path

    def clear_on_boot(self) -> bool:
        """Remove the state a previous run left behind; returns whether there was one."""
        return self.state.clear_on_boot()

    async def enter(self, message: str, retry_after_s: int, model_ids: Iterable[str] = ()) -> None:
        """Refuse all of ``/v1`` from now on with ``message``; the monitor leaves ``model_ids`` alone."""
        await self.state.enter(message, retry_after_s, model_ids)

    async def leave(self) -> None:
        """Serve ``/v1`` again (nodes held by jobs stay held)."""
        await self.state.leave()

    async def current(self) -> MaintenanceNotice | None:
        """The whole router's notice while it lasts, else None."""
        return _router_notice(self.state.global_notice())

    async def holds_models(self) -> bool:
        """Whether a job holds some node's models."""
        return bool(self.state.document.nodes)

    async def notice_for(self, served_name: str) -> MaintenanceNotice | None:
        """The notice for a request naming ``served_name``: the router's, or its node's job's."""
        return _router_notice(self.state.notice_for(served_name))

    def owns(self, model_id: str, node_id: str) -> bool:
        """Whether a job in maintenance holds ``model_id`` (the health monitor's skip check)."""
        return self.state.owns(model_id)


def _router_notice(notice: Notice | None) -> MaintenanceNotice | None:
    return MaintenanceNotice(notice.message, notice.retry_after_s) if notice is not None else None
