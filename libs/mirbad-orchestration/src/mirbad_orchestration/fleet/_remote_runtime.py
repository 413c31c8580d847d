"""The remote runtime: the master's :class:`ModelRuntime` over its nodes' agents.

A start builds the launch spec on the master (vLLM's ``--gpu-memory-utilization`` from the target
node's memory, read from the status cache) and sends it to the node the definition's placement names,
or to the default node (the local one in a fleet of one). Stops and status reads find the model's node
from the status cache, and ask the nodes themselves when the cache does not know it. Every answer is
folded back into the cache, so the endpoint resolver sees a start before the next poll.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Final, TypeVar

import anyio

from mirbad_orchestration.commandline import DEFAULT_TOTAL_GIB, launch_spec_for
from mirbad_orchestration.exceptions import ModelNotOnNodeError, NodeError
from mirbad_protocol import MemorySnapshot, ModelDefinition, ModelState, ModelStatus
from mirbad_protocol.support import single_errors

from ._agent_client import AgentClient
from ._node_monitor import NodeMonitor, NodeState, on_node
from ._nodes import LOCAL_NODE_ID, NodeRecord
from ._runtime import ModelRuntime, NodeView

__all__ = ["DEFAULT_CACHE_MAX_AGE_S", "RemoteModelRuntime", "launch_total_gib"]

DEFAULT_CACHE_MAX_AGE_S: Final = 1.0
"""How old a node's cached statuses may be before :meth:`RemoteModelRuntime.statuses` reads it again."""

_RUNNING: Final = (ModelState.STARTING, ModelState.READY)
_T = TypeVar("_T")


def launch_total_gib(memory: MemorySnapshot, gpu_uuids: Sequence[str] = ()) -> float:
    """The memory vLLM's ``--gpu-memory-utilization`` is a fraction of, on a node with ``memory``.

    On unified memory that is the node's total; on discrete GPUs it is one GPU's memory (vLLM applies
    the fraction per GPU): the smallest of the placed GPUs, or of all GPUs without a placement.
    """
    if memory.unified or not memory.gpus:
        total = memory.total_gib
    else:
        placed = [gpu for gpu in memory.gpus if gpu.uuid in gpu_uuids] or memory.gpus
        total = min(gpu.total_mib for gpu in placed) / 1024
    return total if total > 0 else DEFAULT_TOTAL_GIB


class RemoteModelRuntime(ModelRuntime):
    """Starts, stops and reads models through the agents of the registered nodes.

    Args:
        monitor: the node monitor, whose registry, clients and status cache this runtime shares.
        default_node_id: the node of definitions without a placement.
        cache_max_age_s: how old a node's cached state may be for :meth:`statuses` and :meth:`nodes`
            to use it instead of asking the node.
    """

    def __init__(
        self,
        monitor: NodeMonitor,
        *,
        default_node_id: str = LOCAL_NODE_ID,
        cache_max_age_s: float = DEFAULT_CACHE_MAX_AGE_S,
    ) -> None:
        self._monitor = monitor
        self._cache = monitor.cache
        self.default_node_id = default_node_id
        self._max_age_s = cache_max_age_s

    def node_for(self, definition: ModelDefinition) -> str:
        """The placement's node, else the default node."""
        return definition.placement.node_id if definition.placement else self.default_node_id

    async def start(self, definition: ModelDefinition, *, force: bool = False) -> ModelStatus:
        """Launch ``definition`` on its node; a model already running anywhere is left alone."""
        node_id = self.node_for(definition)
        elsewhere = self._running_elsewhere(definition.id, node_id)
        if elsewhere is not None:
            return elsewhere
        record, client = await self._client(node_id)
        spec = launch_spec_for(definition, total_gib=await self._total_gib(definition, record, client))
        return self._fold(node_id, await client.start(spec, force=force))

    async def stop(self, model_id: str) -> None:
        """Stop the model on every node that has an instance of it."""
        located = self._cache.locate(model_id)
        holders = [located.node_id] if located is not None else await self._search(model_id)
        for node_id in holders:
            _, client = await self._client(node_id)
            try:
                self._fold(node_id, await client.stop(model_id))
            except ModelNotOnNodeError:
                self._fold(node_id, ModelStatus(id=model_id, served_name="", state=ModelState.STOPPED))

    async def restart(self, definition: ModelDefinition, *, force: bool = False) -> ModelStatus:
        """Relaunch ``definition`` on its node; an instance left on another node (a move) is stopped."""
        node_id = self.node_for(definition)
        located = self._cache.locate(definition.id)
        if located is not None and located.node_id != node_id:
            await self.stop(definition.id)
        record, client = await self._client(node_id)
        spec = launch_spec_for(definition, total_gib=await self._total_gib(definition, record, client))
        return self._fold(node_id, await client.restart(spec, force=force))

    async def status(self, model_id: str) -> ModelStatus:
        """The model's status read now from the node that has it (Stopped when none has)."""
        located = self._cache.locate(model_id)
        holders = [located.node_id] if located is not None else await self._search(model_id)
        if not holders:
            return ModelStatus(id=model_id, served_name="", state=ModelState.STOPPED)
        _, client = await self._client(holders[0])
        return self._fold(holders[0], await client.status(model_id))

    async def statuses(self, node_id: str | None = None) -> list[ModelStatus]:
        """The models of ``node_id`` (raising when it cannot be read), or of every reachable node."""
        if node_id is not None:
            return list(await self._models_of(node_id))
        records = await self._monitor.nodes.list()
        found = await _each(records, lambda record: self._models_of(record.id))
        return [status for models in found if models is not None for status in models]

    async def nodes(self) -> list[NodeView]:
        """Every registered node, read again when its cached state is older than the allowed age."""
        records = await self._monitor.nodes.list()
        states = await _each(records, self._fresh_state)
        return [
            NodeView(record.id, state.reachable if state else False, state.boot_id if state else None)
            for record, state in zip(records, states, strict=True)
        ]

    # ------------------------------------------------------------ plumbing

    async def _client(self, node_id: str) -> tuple[NodeRecord, AgentClient]:
        record = await self._monitor.nodes.get(node_id)
        return record, self._monitor.clients.client_for(record)

    async def _total_gib(self, definition: ModelDefinition, record: NodeRecord, client: AgentClient) -> float:
        if definition.runtime != "vllm":
            return DEFAULT_TOTAL_GIB  # only vLLM's argv depends on the node's memory
        state = self._cache.node(record.id)
        memory = state.memory if state and state.memory else await client.memory()
        uuids = definition.placement.gpu_uuids if definition.placement else []
        return launch_total_gib(memory, uuids)

    def _running_elsewhere(self, model_id: str, node_id: str) -> ModelStatus | None:
        # On its own node the agent itself leaves a running model alone; on another node (the
        # placement changed while it ran) only a restart moves it.
        located = self._cache.locate(model_id)
        running = located.model(model_id) if located is not None and located.node_id != node_id else None
        return running if running is not None and running.state in _RUNNING else None

    def _fold(self, node_id: str, status: ModelStatus) -> ModelStatus:
        self._cache.record_status(node_id, status)
        return on_node(status, node_id)

    async def _search(self, model_id: str) -> list[str]:
        # The cache does not know the model (a master that just started, say): ask every node,
        # skipping the ones that cannot be read, since their models cannot be acted on anyway.
        records = await self._monitor.nodes.list()

        async def probe(record: NodeRecord) -> ModelStatus:
            return await self._monitor.clients.client_for(record).status(model_id)

        answers = await _each(records, probe)
        return [
            record.id
            for record, answer in zip(records, answers, strict=True)
            if answer is not None and answer.state is not ModelState.STOPPED
        ]

    async def _models_of(self, node_id: str) -> tuple[ModelStatus, ...]:
        state = self._cache.node(node_id)
        if state is not None and state.reachable and self._is_fresh(state):
            return state.models
        _, client = await self._client(node_id)
        current = self._cache.node(node_id) or NodeState(node_id)
        now = self._monitor.clock()
        try:
            models = tuple(on_node(status, node_id) for status in await client.statuses())
        except NodeError as exc:
            self._cache.put(replace(current, reachable=False, polled_at=now, error=str(exc)))
            raise
        self._cache.put(
            replace(current, reachable=True, polled_at=now, last_seen=now, error=None, models=models)
        )
        return models

    async def _fresh_state(self, record: NodeRecord) -> NodeState:
        state = self._cache.node(record.id)
        if state is not None and self._is_fresh(state):
            return state
        return await self._monitor.poll_node(record)

    def _is_fresh(self, state: NodeState) -> bool:
        if state.polled_at is None:
            return False
        return (self._monitor.clock() - state.polled_at).total_seconds() <= self._max_age_s


async def _each(
    records: Sequence[NodeRecord], read: Callable[[NodeRecord], Awaitable[_T]]
) -> list[_T | None]:
    """``read`` every node at once; a node that fails with a NodeError gives None."""
    results: list[_T | None] = [None] * len(records)

    async def one(index: int, record: NodeRecord) -> None:
        try:
            results[index] = await read(record)
        except NodeError:
            results[index] = None

    with single_errors():
        async with anyio.create_task_group() as group:
            for index, record in enumerate(records):
                group.start_soon(one, index, record)
    return results
