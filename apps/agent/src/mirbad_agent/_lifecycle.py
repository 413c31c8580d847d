"""Starting, restarting and stopping models: admission first, then the driver that runs the spec.

Admission runs before a driver touches anything, against the budgets of every model the node's
drivers report as holding memory (Starting, Ready, Stopping). An admitted start holds a start slot
until the model leaves Starting; :meth:`ModelLifecycle.settle` frees the slots of models seen past
Starting, and every status read and telemetry pass calls it.
"""

from __future__ import annotations

from collections.abc import Iterable

from mirbad_protocol import ContainerLaunch, GpuSelection, ModelState, ModelStatus, ProcessLaunch
from mirbad_protocol.agent import AgentErrorCode
from mirbad_runtime import AdmissionController, AdmissionRequest, ModelBudget, RuntimeDriver, TelemetryRing
from mirbad_runtime.exceptions import StateWriteError

from ._runtimes import NodeRuntimes
from .exceptions import RequestRefusedError

__all__ = ["ModelLifecycle"]

_HOLDING = (ModelState.STARTING, ModelState.READY, ModelState.STOPPING)
_RUNNING = (ModelState.STARTING, ModelState.READY)


class ModelLifecycle:
    """The agent's start, restart and stop, with memory admission and the telemetry ring kept in step.

    Args:
        runtimes: the composed drivers.
        admission: decides whether a start fits.
        ring: the telemetry ring; a model's samples are dropped when it is started or stopped, so
            rates never span two runs.
    """

    def __init__(self, runtimes: NodeRuntimes, admission: AdmissionController, ring: TelemetryRing) -> None:
        self._runtimes = runtimes
        self._admission = admission
        self._ring = ring
        # GPU selections of the models this agent started; an adopted model's come from its status
        # (read back from what runs), and a model that reports none counts on every GPU.
        self._placements: dict[str, GpuSelection] = {}
        self._launching: set[str] = set()

    async def start(self, spec: ContainerLaunch | ProcessLaunch, *, force: bool = False) -> ModelStatus:
        """Admit and launch ``spec``; a model already Starting or Ready is returned as it is.

        Raises:
            LaunchRejectedError: no driver runs the spec, or its driver refused it (422).
            MemoryAdmissionError: the budget does not fit and ``force`` is off (409).
            StartConflictError: another model is still starting on unified memory (409).
            RequestRefusedError: the model is stopping, or runs under another runtime (409).
        """
        driver = self._runtimes.driver_for(spec)
        found = await self._runtimes.locate(spec.model_id)
        if found is not None:
            current_driver, current = found
            if current.state is ModelState.STOPPING:
                raise _conflict(f"model {spec.model_id} is stopping; start it again once it has stopped")
            if current_driver is driver and current.state in _RUNNING:
                return current
            if current_driver is not driver:
                if current.state in _RUNNING:
                    raise _conflict(
                        f"model {spec.model_id} runs under another runtime ({current.runtime}); stop it first"
                    )
                await current_driver.stop(spec.model_id)  # a failed leftover of the previous runtime
        return await self._launch(driver, spec, force=force, restart=False)

    async def restart(self, spec: ContainerLaunch | ProcessLaunch, *, force: bool = False) -> ModelStatus:
        """Stop the model's instance (wherever it runs) and launch ``spec`` in its place.

        Admission counts the running instance's budget as free, and decides before anything stops.
        """
        driver = self._runtimes.driver_for(spec)
        return await self._launch(driver, spec, force=force, restart=True)

    async def stop(self, model_id: str) -> ModelStatus:
        """Stop and remove the model's instance; stopping a model without one does nothing."""
        await self._stop_instance(model_id)
        return await self._runtimes.status(model_id)

    def settle(self, statuses: Iterable[ModelStatus], *, complete: bool = True) -> None:
        """Free the start slots of the models these statuses show past Starting.

        Args:
            statuses: statuses just read from the drivers.
            complete: the statuses cover every model of the node, so a model missing from them is gone;
                with False only the models they name are settled.
        """
        states = {status.id: status.state for status in statuses}
        for model_id in self._admission.starting():
            if model_id in self._launching or (not complete and model_id not in states):
                continue
            if states.get(model_id) is not ModelState.STARTING:
                self._admission.release(model_id)

    async def _launch(
        self, driver: RuntimeDriver, spec: ContainerLaunch | ProcessLaunch, *, force: bool, restart: bool
    ) -> ModelStatus:
        model_id = spec.model_id
        self._launching.add(model_id)
        try:
            running = await self._budgets()
            request = AdmissionRequest.from_launch(spec, force=force, restart=restart)
            await self._admission.admit(request, running)
            try:
                if restart:
                    await self._stop_instance(model_id, release=False)
                status = await driver.start(spec)
            except BaseException:
                self._admission.release(model_id)
                raise
        finally:
            self._launching.discard(model_id)
        self._placements[model_id] = spec.gpus
        self._ring.forget(model_id)
        if status.state is not ModelState.STARTING:
            self._admission.release(model_id)
        return status

    async def _stop_instance(self, model_id: str, *, release: bool = True) -> None:
        found = await self._runtimes.locate(model_id)
        if found is not None:
            try:
                await found[0].stop(model_id)
            except StateWriteError as exc:
                # Stopped, only its record could not be written (a full disk): it holds nothing now.
                self._forget(model_id, release=release)
                message = f"model {model_id!r} was stopped, but {exc}; the file takes it once there is room"
                raise StateWriteError(exc.path, message, disk_full=exc.disk_full) from exc
        self._forget(model_id, release=release)

    def _forget(self, model_id: str, *, release: bool) -> None:
        if release:
            self._admission.release(model_id)
        self._ring.forget(model_id)
        self._placements.pop(model_id, None)

    async def _budgets(self) -> list[ModelBudget]:
        return [
            ModelBudget(
                status.id, status.budget_gib, self._placements.get(status.id) or status.gpus or GpuSelection()
            )
            for status in await self._runtimes.list_statuses()
            if status.state in _HOLDING and status.budget_gib is not None
        ]


def _conflict(message: str) -> RequestRefusedError:
    return RequestRefusedError(AgentErrorCode.START_CONFLICT, message)
