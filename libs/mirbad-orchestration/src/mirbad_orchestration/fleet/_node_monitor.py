"""The node monitor: every few seconds, each node's agent info, model statuses and memory into a cache.

The :class:`StatusCache` is what the master knows about its fleet between two polls. The endpoint
resolver reads it on every request, the remote runtime reads each node's memory total from it, and the
admin UI shows last-seen times from it. An agent that stops answering is marked unreachable; its last
known models and memory are kept but no longer vouched for (its models are unknown, not stopped).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Final

import anyio
from anyio.abc import TaskStatus

from mirbad_orchestration.exceptions import AgentRequestError, NodeError, NodeRegistryError
from mirbad_protocol import MemorySnapshot, ModelState, ModelStatus
from mirbad_protocol.agent import AgentInfo
from mirbad_protocol.support import single_errors

from ._agent_clients import AgentClients
from ._nodes import NodeRecord, NodeRegistry

__all__ = ["DEFAULT_POLL_INTERVAL_S", "NodeMonitor", "NodeState", "StatusCache"]

DEFAULT_POLL_INTERVAL_S: Final = 5.0
"""Seconds between two polls of every node."""

_logger = logging.getLogger("mirbad_orchestration.nodes")
Clock = Callable[[], datetime]
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class NodeState:
    """What the master last learned about one node.

    Attributes:
        node_id: the node.
        reachable: whether the last poll read the node's models; when False ``models`` are the last
            known ones, not the current ones.
        polled_at: when the node was last asked (answered or not).
        last_seen: when the node last answered a poll; None if it never did.
        error: why the last poll failed (or why memory could not be read); None when all went well.
        info: the agent's runtimes, features and version.
        models: the node's model instances, in id order, each with ``node_id`` set.
        memory: the node's last memory snapshot.
    """

    node_id: str
    reachable: bool = False
    polled_at: datetime | None = None
    last_seen: datetime | None = None
    error: str | None = None
    info: AgentInfo | None = None
    models: tuple[ModelStatus, ...] = ()
    memory: MemorySnapshot | None = None

    @property
    def boot_id(self) -> str | None:
        """The node host's boot id when the agent reports one (it changes on every reboot)."""
        return self.info.boot_id if self.info is not None else None

    def model(self, model_id: str) -> ModelStatus | None:
        """The instance of ``model_id`` on this node, or None."""
        return next((status for status in self.models if status.id == model_id), None)


class StatusCache:
    """The last known :class:`NodeState` of every node; reads never wait."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeState] = {}

    def node(self, node_id: str) -> NodeState | None:
        """The state of ``node_id``, or None before its first poll."""
        return self._nodes.get(node_id)

    def nodes(self) -> list[NodeState]:
        """Every polled node, in id order."""
        return [self._nodes[node_id] for node_id in sorted(self._nodes)]

    def locate(self, model_id: str) -> NodeState | None:
        """The node holding an instance of ``model_id``: a running one first, then a failed one."""
        holders = [state for state in self.nodes() if state.model(model_id) is not None]
        return min(holders, key=lambda state: _rank(state.model(model_id)), default=None)

    def put(self, state: NodeState) -> None:
        """Store a node's new state."""
        self._nodes[state.node_id] = state

    def record_status(self, node_id: str, status: ModelStatus) -> None:
        """Fold one fresh model status (from a start or stop) into its node's models."""
        state = self._nodes.get(node_id) or NodeState(node_id)
        others = [known for known in state.models if known.id != status.id]
        if status.state is not ModelState.STOPPED:
            others.append(on_node(status, node_id))
        self._nodes[node_id] = replace(state, models=tuple(sorted(others, key=lambda known: known.id)))

    def forget(self, node_id: str) -> None:
        """Drop a node that left the fleet."""
        self._nodes.pop(node_id, None)


def on_node(status: ModelStatus, node_id: str) -> ModelStatus:
    """``status`` with its ``node_id`` set to the node that reported it."""
    return status if status.node_id == node_id else status.model_copy(update={"node_id": node_id})


def _rank(status: ModelStatus | None) -> int:
    # Starting or Ready beats Failed or Stopping, which beats a Stopped leftover.
    if status is None or status.state is ModelState.STOPPED:
        return 2
    return 0 if status.state in (ModelState.STARTING, ModelState.READY) else 1


class NodeMonitor:
    """Polls every registered node into a :class:`StatusCache`.

    Args:
        nodes: the node registry (read on every poll, so new and removed nodes are followed).
        clients: the agent clients.
        cache: where states go; a new cache when None.
        interval_s: seconds between two polls.
        poll_timeout_s: bound on one node's whole poll, on top of each call's own timeout.
        clock: the current time (tests pass a fake clock's ``now``).
        sleep: waits between polls (tests pass a fake clock's ``sleep``).
    """

    def __init__(
        self,
        nodes: NodeRegistry,
        clients: AgentClients,
        *,
        cache: StatusCache | None = None,
        interval_s: float = DEFAULT_POLL_INTERVAL_S,
        poll_timeout_s: float = 30.0,
        clock: Clock | None = None,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        self.nodes = nodes
        self.clients = clients
        self.cache = cache or StatusCache()
        self.clock: Clock = clock or (lambda: datetime.now(UTC))
        self._interval_s = interval_s
        self._poll_timeout_s = poll_timeout_s
        self._sleep = sleep

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Poll every node, then again every ``interval_s``, until cancelled (after the first poll)."""
        await self.poll_all()
        task_status.started()
        while True:
            await self._sleep(self._interval_s)
            await self.poll_all()

    async def poll_all(self) -> list[NodeState]:
        """Poll every registered node at once; forget nodes that left the registry."""
        try:
            records = await self.nodes.list()
        except NodeRegistryError as exc:
            _logger.error("cannot read the node registry, node states not refreshed: %s", exc)
            return self.cache.nodes()
        registered = {record.id for record in records}
        for gone in [state.node_id for state in self.cache.nodes() if state.node_id not in registered]:
            self.cache.forget(gone)
            await self.clients.forget(gone)
        with single_errors():
            async with anyio.create_task_group() as group:
                for record in records:
                    group.start_soon(self.poll_node, record)
        return self.cache.nodes()

    async def poll_node(self, record: NodeRecord) -> NodeState:
        """Read one node's info, statuses and memory now, store the result and return it."""
        previous = self.cache.node(record.id) or NodeState(record.id)
        started = self.clock()
        try:
            with anyio.fail_after(self._poll_timeout_s):
                state = await self._read(record, previous, started)
        except (NodeError, TimeoutError) as exc:
            reason = str(exc) or f"node {record.id!r} did not answer within {self._poll_timeout_s} s"
            state = replace(previous, reachable=False, polled_at=started, error=reason)
        self._log_change(previous, state)
        self.cache.put(state)
        return state

    async def _read(self, record: NodeRecord, previous: NodeState, now: datetime) -> NodeState:
        client = self.clients.client_for(record)
        info = await client.info()
        models = tuple(on_node(status, record.id) for status in await client.statuses())
        memory, error = previous.memory, None
        try:
            memory = await client.memory()
        except AgentRequestError as exc:
            # The node answers and its models are known; only its memory probe failed this time.
            error = str(exc)
        return NodeState(record.id, True, now, now, error, info, models, memory)

    @staticmethod
    def _log_change(previous: NodeState, state: NodeState) -> None:
        if previous.reachable and not state.reachable:
            _logger.warning("node %s became unreachable: %s", state.node_id, state.error)
        elif state.reachable and not previous.reachable:
            _logger.info("node %s is reachable", state.node_id)
        elif previous.polled_at is None and not state.reachable:
            _logger.warning("node %s is unreachable: %s", state.node_id, state.error)
