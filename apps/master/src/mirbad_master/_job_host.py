"""The master's side of benchmark jobs: :class:`~mirbad_orchestration.jobs.JobHost` over its services.

A job's requests go straight to the model's endpoint, the same agent proxy URL and mutual-TLS client
the router forwards to (:class:`~mirbad_orchestration.fleet.AgentEndpointResolver`), so the maintenance
gate on ``/v1`` never blocks them and the router's counters and key limits stay out of the numbers.
The settings a result records are those this master launched the instance with (the saved ones when
it did not launch it), with the config hash the node reports for the running instance.
"""

from __future__ import annotations

from mirbad_orchestration import ModelRegistry
from mirbad_orchestration.benchmarks import ChatEndpoint
from mirbad_orchestration.commandline import DEFAULT_TOTAL_GIB, RestartPendingCheck, build_args
from mirbad_orchestration.fleet import (
    AgentClients,
    AgentEndpointResolver,
    NodeRegistry,
    NodeState,
    RemoteTelemetryCollector,
    StatusCache,
    launch_total_gib,
    model_node,
    model_status,
)
from mirbad_orchestration.jobs import JobHost, JobTarget, NodeModel
from mirbad_protocol import GpuMemory, ModelDefinition, ModelMetrics, ModelState

from ._master_runtime import MasterRuntime

__all__ = ["MasterJobHost"]

# A benchmark chat may decode for long on a slow model; the suite bounds the whole job anyway.
_REQUEST_TIMEOUT_S = 900.0


class MasterJobHost(JobHost):
    """Targets, placements, telemetry and GPUs from the master's registry, cache and agents."""

    def __init__(
        self,
        *,
        models: ModelRegistry,
        nodes: NodeRegistry,
        clients: AgentClients,
        cache: StatusCache,
        endpoints: AgentEndpointResolver,
        telemetry: RemoteTelemetryCollector,
        runtime: MasterRuntime,
        restart_pending: RestartPendingCheck,
    ) -> None:
        self._models = models
        self._nodes = nodes
        self._clients = clients
        self._cache = cache
        self._endpoints = endpoints
        self._telemetry = telemetry
        self._runtime = runtime
        self._restart_pending = restart_pending

    async def target(self, model_id: str) -> JobTarget:
        """The model as every view shows it, with the way to its endpoint."""
        definition = await self._models.get(model_id)
        endpoint = await self._endpoints.endpoint(definition)
        status = model_status(self._cache, definition, self._runtime.default_node_id)
        chat = None
        if endpoint.ready and endpoint.base_url is not None and endpoint.client is not None:
            chat = ChatEndpoint(
                endpoint.base_url, endpoint.client, definition.served_name, timeout_s=_REQUEST_TIMEOUT_S
            )
        launched = self._runtime.launched(model_id) or definition
        node = self._cache.node(endpoint.node_id)
        pending = self._restart_pending.is_pending(
            definition,
            status,
            launched=self._runtime.launched(model_id),
            total_gib=_total_gib(definition, node),
        )
        return JobTarget(
            model_id=model_id,
            served_name=definition.served_name,
            node_id=endpoint.node_id,
            runtime=definition.runtime,
            state=endpoint.state,
            error=endpoint.error,
            endpoint=chat,
            max_model_len=definition.max_model_len,
            config_hash=status.config_hash,
            restart_pending=pending,
            # Read back from the running instance where its node tells; else what this master would launch.
            settings=status.argv or build_args(launched, total_gib=_total_gib(launched, node)),
            max_num_seqs=launched.max_num_seqs,
            tags=tuple(definition.tags),
        )

    async def node_models(self, node_id: str) -> list[NodeModel]:
        """Every registered model placed on (or running on) ``node_id``."""
        placed = []
        for definition in await self._models.list():
            if model_node(self._cache, definition, self._runtime.default_node_id) != node_id:
                continue
            status = model_status(self._cache, definition, self._runtime.default_node_id)
            placed.append(NodeModel(definition.id, definition.served_name, status.state is ModelState.READY))
        return placed

    def latest_metrics(self, model_id: str) -> ModelMetrics | None:
        """The telemetry collector's newest sample."""
        return self._telemetry.latest(model_id)

    async def gpus(self, node_id: str) -> list[GpuMemory]:
        """The node's agent runs nvidia-smi now; its errors (unreachable, probe failed) propagate."""
        client = self._clients.client_for(await self._nodes.get(node_id))
        return await client.gpus()


def _total_gib(definition: ModelDefinition, node: NodeState | None) -> float:
    if definition.runtime != "vllm" or node is None or node.memory is None:
        return DEFAULT_TOTAL_GIB
    gpus = definition.placement.gpu_uuids if definition.placement else []
    return launch_total_gib(node.memory, gpus)
