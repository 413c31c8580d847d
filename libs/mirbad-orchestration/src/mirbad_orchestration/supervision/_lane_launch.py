"""The health monitor's own launches: through the node's start lane, one model at a time, until settled.

Boot auto-start, a rebooted node's relaunch and crash restarts all launch this way: take the lane,
check the model is still wanted (saved, placed on that node, not owned by a job, not paused, not
already running), list it in the recovery state, start it, audit the start as ``system:autostart``,
then hold the lane until the model is Ready, has failed, or the startup time is up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from mirbad_orchestration.exceptions import NodeNotReadyToStartError, NodeTimeoutError, NodeUnreachableError
from mirbad_orchestration.fleet import ModelRuntime
from mirbad_orchestration.stores import AuditLog, AuditOutcome
from mirbad_protocol import MirbadError, ModelState, ModelStatus

from ._health_settings import AUTOSTART_ACTOR, DefinitionSource, HealthSettings
from ._recovery_state import RecoveryState
from ._restart_pauses import RestartPauses
from ._start_lanes import StartLanes

__all__: list[str] = []

RUNNING: Final = frozenset({ModelState.STARTING, ModelState.READY})


@dataclass(frozen=True)
class LaunchOutcome:
    """How a launch ended.

    Attributes:
        status: the last status read; ``None`` when nothing was launched (no longer wanted).
        failure: why the model did not come up, when it did not (one more crash in a row).
        node_down: the failure was the node not answering, which says nothing about the model.
        deferred: why the node cannot start the model yet (no crash: the launch is tried again later).
    """

    status: ModelStatus | None = None
    failure: str | None = None
    node_down: bool = False
    deferred: str | None = None


@dataclass(frozen=True, kw_only=True)
class LaneLauncher:
    """Launches models for the health monitor (see the module); every field is the monitor's own."""

    runtime: ModelRuntime
    definitions: DefinitionSource
    lanes: StartLanes
    recovery: RecoveryState
    pauses: RestartPauses
    audit: AuditLog | None
    settings: HealthSettings
    skipped: Callable[[str, str], bool]
    clock: Callable[[], datetime]
    sleep: Callable[[float], Awaitable[None]]

    async def launch(self, node_id: str, model_id: str) -> LaunchOutcome:
        """Launch ``model_id`` on ``node_id`` if it is still wanted; never raises a ``MirbadError``."""
        try:
            async with self.lanes.hold(node_id, holder=model_id, wait=self.settings.lane_wait):
                return await self._launch_in_lane(node_id, model_id)
        except (NodeUnreachableError, NodeTimeoutError) as exc:
            return LaunchOutcome(failure=str(exc), node_down=True)
        except NodeNotReadyToStartError as exc:
            return LaunchOutcome(deferred=str(exc))
        except MirbadError as exc:
            return LaunchOutcome(failure=str(exc) or type(exc).__name__)

    async def _launch_in_lane(self, node_id: str, model_id: str) -> LaunchOutcome:
        definition = next((d for d in await self.definitions() if d.id == model_id), None)
        if definition is None or self.runtime.node_for(definition) != node_id:
            return LaunchOutcome()  # deleted or moved meanwhile
        if self.skipped(model_id, node_id) or await self.pauses.get(model_id) is not None:
            return LaunchOutcome()
        if (await self.runtime.status(model_id)).state in RUNNING:
            return LaunchOutcome()  # it came back, or someone started it meanwhile
        await self.recovery.add(node_id, model_id)
        try:
            status = await self.runtime.start(definition)
        except NodeNotReadyToStartError:
            raise  # nothing was started and nothing failed: no audit line for each try
        except MirbadError as exc:
            await self._audit_start(node_id, model_id, "failed", str(exc))
            raise
        await self._audit_start(node_id, model_id, "ok")
        status = await self._until_settled(model_id, status)
        if status.state in RUNNING:
            return LaunchOutcome(status)
        return LaunchOutcome(status, status.error or f"{status.state.value} right after its start")

    async def _audit_start(
        self, node_id: str, model_id: str, outcome: AuditOutcome, detail: str | None = None
    ) -> None:
        await audit_model(self.audit, AUTOSTART_ACTOR, "model.start", model_id, node_id, outcome, detail)

    async def _until_settled(self, model_id: str, status: ModelStatus) -> ModelStatus:
        deadline = self.clock() + timedelta(seconds=self.settings.startup_timeout)
        while status.state is ModelState.STARTING and self.clock() < deadline:
            await self.sleep(self.settings.ready_check_interval)
            status = await self.runtime.status(model_id)
        return status


async def audit_model(
    log: AuditLog | None,
    actor: str,
    action: str,
    model_id: str,
    node_id: str | None,
    outcome: AuditOutcome,
    detail: str | None = None,
) -> None:
    """Audit an action on a model when there is an audit log."""
    if log is not None:
        await log.record(actor, action, model_id, outcome=outcome, node_id=node_id, detail=detail)
