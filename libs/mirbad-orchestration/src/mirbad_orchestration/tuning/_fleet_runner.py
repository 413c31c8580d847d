"""The product's candidate runners: tuning instances through the node's agent, the saved model around them.

Before the first candidate the model's own instance is stopped (the node's memory goes to the
candidates; the node is in maintenance, so the health monitor leaves the model alone); at the end, on
cancel and on failure the model is started again and waited for (bounded), with a note when it did not
come back Ready. What is started is the registry's definition as it is then, read again, not the one
captured when the run began: a model deleted meanwhile stays stopped (it would otherwise run outside
the registry) and an edit made meanwhile is not undone. What the node says of the model's files before
a run is :mod:`._node_facts`'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import anyio

from mirbad_orchestration.benchmarks import is_pooling
from mirbad_orchestration.exceptions import UnknownModelError
from mirbad_orchestration.fleet import AgentClients, ModelRuntime, NodeRegistry, launch_total_gib
from mirbad_orchestration.jobs import JobTarget
from mirbad_protocol import MirbadError, ModelDefinition, ModelState
from mirbad_protocol.benchmarks import BenchmarkSizes, PresetSizes

from ._instances import AgentTuningInstances, InstanceCandidateRunner
from ._runner import CandidateRunner

__all__ = ["FleetTuningRunners"]

_RESTORE_POLL_S: Final = 1.0


class FleetTuningRunners:
    """Builds each run's :class:`InstanceCandidateRunner` on the model's node.

    Args:
        nodes: the node registry.
        clients: the agent clients.
        runtime: starts and stops the saved model.
        sizes: the suite's sizes (the spec's by default).
        preset_sizes: a workload preset run's sizes (the spec's by default).
        embedding_sizes: the embeddings suite's sizes for a pooling model (the spec's by default).
        startup_timeout_s: how long a candidate, and the restored model, may take to become Ready.
        definition: reads a model's definition from the registry when the run ends (the saved one
            of the run's start when not given); ``UnknownModelError`` means it was deleted.
    """

    def __init__(
        self,
        nodes: NodeRegistry,
        clients: AgentClients,
        runtime: ModelRuntime,
        *,
        sizes: BenchmarkSizes | None = None,
        embedding_sizes: PresetSizes | None = None,
        startup_timeout_s: float = 600.0,
        preset_sizes: PresetSizes | None = None,
        definition: Callable[[str], Awaitable[ModelDefinition]] | None = None,
    ) -> None:
        self._definition = definition
        self._preset_sizes = preset_sizes
        self._nodes = nodes
        self._clients = clients
        self._runtime = runtime
        self._sizes = sizes
        self._embedding_sizes = embedding_sizes or PresetSizes()
        self._startup_timeout_s = startup_timeout_s

    async def __call__(self, target: JobTarget, saved: ModelDefinition) -> CandidateRunner:
        """The runner of one run of ``saved`` on ``target``'s node."""
        client = self._clients.client_for(await self._nodes.get(target.node_id))
        uuids = saved.placement.gpu_uuids if saved.placement else []
        total_gib = launch_total_gib(await client.memory(), uuids)

        async def prepare() -> None:
            await self._runtime.stop(saved.id)

        async def restore() -> str | None:
            return await self._restore(saved)

        return InstanceCandidateRunner(
            AgentTuningInstances(client),
            sizes=self._sizes,
            preset_sizes=self._preset_sizes,
            total_gib=total_gib,
            startup_timeout_s=self._startup_timeout_s,
            prepare=prepare,
            restore=restore,
            embeddings=self._embedding_sizes if is_pooling(target.settings, target.tags) else None,
        )

    async def _restore(self, saved: ModelDefinition) -> str | None:
        current = saved
        if self._definition is not None:
            try:
                current = await self._definition(saved.id)
            except UnknownModelError:
                return f"{saved.id!r} was deleted during the run: it was not started again"
        try:
            await self._runtime.start(current)
        except MirbadError as exc:
            return f"the saved settings could not be started again: {exc}"
        with anyio.move_on_after(self._startup_timeout_s):
            while True:
                status = await self._runtime.status(saved.id)
                if status.state is ModelState.READY:
                    return None
                if status.state is ModelState.FAILED:
                    return f"the model did not come back: it failed ({status.error or 'no reason given'})"
                await anyio.sleep(_RESTORE_POLL_S)
        return f"the model did not come back Ready within {self._startup_timeout_s:g} s"
