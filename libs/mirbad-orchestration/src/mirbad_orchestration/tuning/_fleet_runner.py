"""The product's candidate runners: tuning instances through the node's agent, the saved model around them.

Before the first candidate the model's own instance is stopped (the node's memory goes to the
candidates; the node is in maintenance, so the health monitor leaves the model alone); at the end, on
cancel and on failure the saved definition is started again and waited for (bounded), with a note
when it did not come back Ready. :class:`FleetModelShapes` reads a model's checkpoint shape on its
node for the KV gate: a GGUF file's header, or a Hugging Face folder's ``config.json`` and weights'
size, through the agent. :class:`FleetGateInputs` reads what the preset search's gates need from the
same route: the folder's ``config.json``, the draft model's, the weights' size and format, and the
KV gate's verdict. A node that cannot say (an older agent, a missing file) leaves a gate unknown: the
run goes on with what is proven without it, noted on the run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

import anyio

from mirbad_orchestration.benchmarks import is_pooling
from mirbad_orchestration.fleet import AgentClients, ModelRuntime, NodeRegistry, launch_total_gib
from mirbad_orchestration.jobs import JobTarget
from mirbad_protocol import BenchmarkSizes, MirbadError, ModelDefinition, ModelState, PresetSizes

from ._dimensions import ModelShape, kv_auto_fits
from ._gates import weights_format
from ._instances import AgentTuningInstances, InstanceCandidateRunner
from ._preset_search import GateInputs
from ._runner import CandidateRunner

__all__ = ["FleetGateInputs", "FleetModelShapes", "FleetTuningRunners"]

_RESTORE_POLL_S: Final = 1.0


class FleetModelShapes:
    """Reads a model's checkpoint shape on its node (a :data:`~mirbad_orchestration.tuning.ShapeReader`).

    Args:
        nodes: the node registry.
        clients: the agent clients.
    """

    def __init__(self, nodes: NodeRegistry, clients: AgentClients) -> None:
        self._nodes = nodes
        self._clients = clients

    async def __call__(self, target: JobTarget, saved: ModelDefinition) -> ModelShape | None:
        """The shape of a GGUF header or an HF folder's ``config.json``; None when the node cannot say."""
        try:
            client = self._clients.client_for(await self._nodes.get(target.node_id))
            if saved.model_path.lower().endswith(".gguf"):
                return ModelShape.from_gguf(await client.gguf_inspect(saved.model_path))
            info = await client.model_config(saved.model_path)
        except MirbadError:
            return None  # the gate is then unknown: the KV dimension is skipped, the run goes on
        return ModelShape.from_config(info.config, weights_bytes=info.weights_bytes or None)


class FleetGateInputs:
    """Reads the preset search's gates' inputs on a model's node (a :data:`.GateReader`).

    For a Hugging Face folder: its ``config.json`` (MTP layers, architectures, Mamba keys, experts),
    the draft model's ``config.json`` when the saved speculative config names one (its block size),
    the weights' size on disk and their format (``quantization_config``, else the dtype), and the KV
    gate's verdict from the shape. The image's registered MTP architectures are not known to the node,
    so they stay unknown (only a saved MTP config proves MTP). A GGUF file, or a node that cannot say,
    answers None (the registry's tags then decide).

    Args:
        nodes: the node registry.
        clients: the agent clients.
    """

    def __init__(self, nodes: NodeRegistry, clients: AgentClients) -> None:
        self._nodes = nodes
        self._clients = clients

    async def __call__(self, target: JobTarget, saved: ModelDefinition) -> GateInputs | None:
        """The gates' inputs of ``saved`` on ``target``'s node; None when there is no folder to read."""
        if saved.model_path.lower().endswith(".gguf"):
            return None
        try:
            client = self._clients.client_for(await self._nodes.get(target.node_id))
            info = await client.model_config(saved.model_path)
        except MirbadError:
            return None
        drafter = None
        spec = saved.speculative
        if spec is not None and spec.model is not None and spec.method != "mtp":
            try:
                drafter = (await client.model_config(spec.model)).config
            except MirbadError:
                drafter = None  # the block size is then unknown: the saved depth only, noted on the run
        weights = info.weights_bytes or None
        shape = ModelShape.from_config(info.config, weights_bytes=weights)
        return replace(
            GateInputs.from_tags(saved),
            config=info.config,
            drafter_config=drafter,
            weights_bytes=weights,
            weights_format=weights_format(info.config),
            kv_auto_fits=kv_auto_fits(saved, shape),
        )


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
    ) -> None:
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
        try:
            await self._runtime.start(saved)
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
