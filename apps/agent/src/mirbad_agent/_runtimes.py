"""The drivers an agent composed, behind one front: which driver runs a spec, which one has a model.

An agent may hold a container driver and a process driver at once (a Linux PC runs vLLM containers
and llama-server). Each model lives in exactly one of them; the agent finds it by asking each driver,
since drivers derive state from their runtime and the agent keeps no model list of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import anyio

from mirbad_protocol import ContainerLaunch, ModelState, ModelStatus, ProcessLaunch
from mirbad_protocol.agent import ContainerRuntimeInfo, FeatureFlag, ProcessRuntimeInfo
from mirbad_protocol.support import single_errors
from mirbad_runtime import (
    ExecutableCatalog,
    GpuOwner,
    LaunchRejectedError,
    ModelNotFoundError,
    RuntimeDriver,
    RuntimeUnavailableError,
)

__all__ = ["ComposedDriver", "NodeRuntimes"]

logger = logging.getLogger(__name__)

_FEATURES = {
    ("container", "vllm"): FeatureFlag.RUNTIME_VLLM_CONTAINER,
    ("process", "llamacpp"): FeatureFlag.RUNTIME_LLAMACPP_PROCESS,
    ("process", "mlx"): FeatureFlag.RUNTIME_MLX_PROCESS,
}


@dataclass(frozen=True)
class ComposedDriver:
    """One driver of the agent and the runtimes it offers.

    Attributes:
        driver: the driver.
        runtimes: what the driver runs, as reported to the master; a spec's ``kind`` and ``runtime``
            must match one of them.
        catalog: the executable catalogue of a process driver, checked once at start-up.
    """

    driver: RuntimeDriver
    runtimes: tuple[ContainerRuntimeInfo | ProcessRuntimeInfo, ...]
    catalog: ExecutableCatalog | None = None

    def runs(self, spec: ContainerLaunch | ProcessLaunch) -> bool:
        """Whether this driver takes ``spec``."""
        return any(info.kind == spec.kind and info.runtime == spec.runtime for info in self.runtimes)


class NodeRuntimes:
    """Every driver of the agent, asked together.

    Args:
        drivers: the composed drivers; empty on a node with neither Docker nor a process host.
    """

    def __init__(self, drivers: Sequence[ComposedDriver]) -> None:
        self.drivers = tuple(drivers)

    @property
    def runtimes(self) -> list[ContainerRuntimeInfo | ProcessRuntimeInfo]:
        """The runtimes of every driver, in composition order."""
        return [info for composed in self.drivers for info in composed.runtimes]

    def runtime_features(self) -> list[FeatureFlag]:
        """The ``runtime.*`` feature flags of the composed runtimes."""
        found = (_FEATURES.get((info.kind, info.runtime)) for info in self.runtimes)
        return [flag for flag in found if flag is not None]

    def driver_for(self, spec: ContainerLaunch | ProcessLaunch) -> RuntimeDriver:
        """The driver that runs ``spec``.

        Raises:
            LaunchRejectedError: no driver of this node runs that kind and runtime.
        """
        for composed in self.drivers:
            if composed.runs(spec):
                return composed.driver
        offered = ", ".join(f"{info.runtime} ({info.kind})" for info in self.runtimes) or "none"
        raise LaunchRejectedError(
            f"this node does not run {spec.runtime} models as {spec.kind}s (its runtimes: {offered})"
        )

    async def locate(self, model_id: str) -> tuple[RuntimeDriver, ModelStatus] | None:
        """The driver that has an instance of ``model_id`` (in any state but Stopped), with its status.

        Raises:
            RuntimeUnavailableError: no driver has the model and at least one could not be asked, so
                the model may well exist.
        """
        unavailable: RuntimeUnavailableError | None = None
        for composed in self.drivers:
            try:
                status = await composed.driver.status(model_id)
            except RuntimeUnavailableError as exc:
                unavailable = exc
                continue
            if status.state is not ModelState.STOPPED:
                return composed.driver, status
        if unavailable is not None:
            raise unavailable
        return None

    async def status(self, model_id: str) -> ModelStatus:
        """The model's status from the driver that has it; Stopped when none has."""
        found = await self.locate(model_id)
        if found is None:
            return ModelStatus(id=model_id, served_name="", state=ModelState.STOPPED)
        return found[1]

    async def list_statuses(self) -> list[ModelStatus]:
        """Every instance of every driver, in model-id order (all drivers are asked at once).

        Raises:
            RuntimeUnavailableError: a driver could not be asked; a partial list would read as
                models having stopped.
        """
        found: list[list[ModelStatus]] = [[] for _ in self.drivers]

        async def read(index: int, driver: RuntimeDriver) -> None:
            found[index] = await driver.list_statuses()

        with single_errors():
            async with anyio.create_task_group() as group:
                for index, composed in enumerate(self.drivers):
                    group.start_soon(read, index, composed.driver)
        merged: dict[str, ModelStatus] = {}
        for statuses in found:
            for status in statuses:
                # A model in two drivers (left over after its runtime changed): the live one wins.
                if status.id not in merged or merged[status.id].state in _GONE:
                    merged[status.id] = status
        return [merged[model_id] for model_id in sorted(merged)]

    async def upstream(self, model_id: str) -> tuple[str, dict[str, str]]:
        """Where the model's server is reached (base URL ending in ``/``) and the headers it wants.

        Asks the drivers for their record of the model rather than its status, so a proxied request
        costs no health check.

        Raises:
            ModelNotFoundError: no driver has an instance of the model.
            RuntimeUnavailableError: no driver has it and at least one could not be asked.
        """
        unavailable: RuntimeUnavailableError | None = None
        for composed in self.drivers:
            try:
                url = await composed.driver.upstream_url(model_id)
                headers = await composed.driver.upstream_headers(model_id)
            except ModelNotFoundError:
                continue
            except RuntimeUnavailableError as exc:
                unavailable = exc
                continue
            return url, headers
        if unavailable is not None:
            raise unavailable
        raise ModelNotFoundError(model_id)

    async def memory_bytes(self, model_id: str) -> int | None:
        """The model's measured memory from the first driver that can measure it (None if none can).

        A driver that cannot be asked measures nothing: telemetry reports no measure rather than failing.
        """
        for composed in self.drivers:
            try:
                measured = await composed.driver.memory_bytes(model_id)
            except (ModelNotFoundError, RuntimeUnavailableError):
                continue
            if measured is not None:
                return measured
        return None

    async def gpu_owner(self, model_id: str) -> GpuOwner | None:
        """What the model's GPU processes are found by, from the first driver that runs it (None if none)."""
        for composed in self.drivers:
            try:
                owner = await composed.driver.gpu_owner(model_id)
            except (ModelNotFoundError, RuntimeUnavailableError):
                continue
            if owner is not None:
                return owner
        return None

    async def adopt(self) -> list[ModelStatus]:
        """Let every driver take over what a previous agent left running; a failing driver is skipped.

        Returns:
            The adopted statuses of the drivers that answered, in model-id order.
        """
        adopted: list[ModelStatus] = []
        for composed in self.drivers:
            try:
                adopted.extend(await composed.driver.adopt())
            except RuntimeUnavailableError as exc:
                # Nothing is lost: drivers derive state on every read, so the models show up later.
                logger.warning("could not adopt the models of %s: %s", type(composed.driver).__name__, exc)
        return sorted(adopted, key=lambda status: status.id)

    async def aclose(self) -> None:
        """Close every driver; their models keep running."""
        for composed in self.drivers:
            with anyio.CancelScope(shield=True):
                await composed.driver.aclose()


_GONE = (ModelState.STOPPED, ModelState.FAILED)
