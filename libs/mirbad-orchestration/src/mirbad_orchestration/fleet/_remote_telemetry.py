"""The remote telemetry collector: every model's metrics history on the master, read from the agents.

Each agent scrapes its Ready models into a ring of samples. The collector asks every reachable node for
the samples taken since the newest one it already has, and keeps a bounded history per model. Token
rates come from the agent when it computed them; a sample without a rate gets one from the previous
sample kept here (counter increase over elapsed seconds), under the same rules as the agent's: no rate
across a counter reset, a missing counter or a clock that did not move forward. Each node's host
samples (its host services' GPU memory per pass) are kept beside them, per node, under the same bound.
From each model's history the collector also tells whether a Ready model is still making progress
(:meth:`RemoteTelemetryCollector.progress`, judged by :func:`judge_progress`).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Final

import anyio
from anyio.abc import TaskStatus

from mirbad_orchestration.exceptions import NodeError, NodeRegistryError
from mirbad_protocol import ModelMetrics, RuntimeKind
from mirbad_protocol.agent import HostGpuSample

from ._agent_clients import AgentClients
from ._model_progress import ModelProgress, ProgressThresholds, judge_progress
from ._node_monitor import StatusCache
from ._nodes import NodeRecord, NodeRegistry

__all__ = ["DEFAULT_HISTORY_CAPACITY", "DEFAULT_TELEMETRY_INTERVAL_S", "RemoteTelemetryCollector"]

DEFAULT_HISTORY_CAPACITY: Final = 720
"""Samples kept per model on the master: an hour at one scrape every five seconds."""
DEFAULT_TELEMETRY_INTERVAL_S: Final = 10.0
"""Seconds between two reads of every node's telemetry ring."""

_logger = logging.getLogger("mirbad_orchestration.telemetry")
Sleep = Callable[[float], Awaitable[None]]


def _with_rates(sample: ModelMetrics, previous: ModelMetrics | None) -> ModelMetrics:
    """``sample`` with each missing token rate computed from ``previous`` (rates it has are kept)."""
    if previous is None:
        return sample
    elapsed = (sample.at - previous.at).total_seconds()
    update: dict[str, float | None] = {}
    if sample.prompt_tokens_per_second is None:
        update["prompt_tokens_per_second"] = _rate(
            sample.prompt_tokens_total, previous.prompt_tokens_total, elapsed
        )
    if sample.generation_tokens_per_second is None:
        update["generation_tokens_per_second"] = _rate(
            sample.generation_tokens_total, previous.generation_tokens_total, elapsed
        )
    return sample.model_copy(update=update) if update else sample


def _rate(current: float | None, previous: float | None, elapsed: float) -> float | None:
    if current is None or previous is None or elapsed <= 0 or current < previous:
        return None
    return (current - previous) / elapsed


class RemoteTelemetryCollector:
    """Reads every node's telemetry ring into a bounded per-model history.

    Reads (:meth:`history`, :meth:`latest`) never wait and may come from any thread.

    Args:
        nodes: the node registry.
        clients: the agent clients.
        cache: the status cache; nodes it marks unreachable are skipped. Without one every node is asked.
        capacity: samples kept per model (the oldest go first).
        interval_s: seconds between two reads of every node.
        sleep: waits between reads (tests pass a fake clock's ``sleep``).
        progress: when a Ready model is flagged Stalled or Slow.

    Raises:
        ValueError: ``capacity`` is under one, or a ``progress`` window could never fire at
            ``interval_s`` (named, with why).
    """

    def __init__(
        self,
        nodes: NodeRegistry,
        clients: AgentClients,
        *,
        cache: StatusCache | None = None,
        capacity: int = DEFAULT_HISTORY_CAPACITY,
        interval_s: float = DEFAULT_TELEMETRY_INTERVAL_S,
        sleep: Sleep = anyio.sleep,
        progress: ProgressThresholds | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError("a telemetry history holds at least one sample per model")
        self._thresholds = progress or ProgressThresholds()
        self._thresholds.check(interval_s)
        self._nodes = nodes
        self._clients = clients
        self._cache = cache
        self._capacity = capacity
        self._interval_s = interval_s
        self._sleep = sleep
        self._lock = threading.Lock()
        self._histories: dict[str, deque[ModelMetrics]] = {}
        self._node_of: dict[str, str] = {}
        self._since: dict[str, datetime] = {}
        self._hosts: dict[str, deque[HostGpuSample]] = {}

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Read every node now, then every ``interval_s``, until cancelled."""
        task_status.started()
        while True:
            await self.poll_all()
            await self._sleep(self._interval_s)

    async def poll_all(self) -> None:
        """Read the rings of every registered (and, with a cache, reachable) node at once."""
        try:
            records = await self._nodes.list()
        except NodeRegistryError as exc:
            _logger.error("cannot read the node registry, telemetry not refreshed: %s", exc)
            return
        with self._lock:
            # A removed node's host services are gone with it (its models go through retain()).
            registered = {record.id for record in records}
            for node_id in [known for known in self._hosts if known not in registered]:
                del self._hosts[node_id]
        async with anyio.create_task_group() as group:
            for record in records:
                state = self._cache.node(record.id) if self._cache is not None else None
                if state is None or state.reachable:
                    group.start_soon(self._poll_quietly, record)

    async def poll_node(self, record: NodeRecord) -> int:
        """Read one node's samples newer than the last ones kept from it; returns how many were new.

        Raises:
            NodeError: the node could not be read.
        """
        snapshot = await self._clients.client_for(record).telemetry(since=self._since.get(record.id))
        added = 0
        with self._lock:
            for telemetry in snapshot.models:
                added += self._merge(record.id, telemetry.model_id, telemetry.samples)
            self._merge_host(record.id, snapshot.host_samples)
        return added

    def host_histories(self) -> dict[str, list[HostGpuSample]]:
        """Every node's kept host samples (its host services' GPU memory), oldest first, by node id."""
        with self._lock:
            return {node_id: list(samples) for node_id, samples in sorted(self._hosts.items()) if samples}

    def history(
        self, model_id: str, *, since: datetime | None = None, limit: int | None = None
    ) -> list[ModelMetrics]:
        """The kept samples of ``model_id``, oldest first, taken after ``since``, the newest ``limit``."""
        with self._lock:
            samples = list(self._histories.get(model_id, ()))
        if since is not None:
            samples = [sample for sample in samples if sample.at > since]
        if limit is not None:
            samples = samples[-limit:] if limit > 0 else []
        return samples

    def latest(self, model_id: str) -> ModelMetrics | None:
        """The newest sample of ``model_id``, or None."""
        with self._lock:
            history = self._histories.get(model_id)
            return history[-1] if history else None

    def progress(self, model_id: str, runtime: RuntimeKind) -> ModelProgress | None:
        """Whether ``model_id`` (a Ready model of ``runtime``) is Stalled or Slow; None while it progresses.

        Judged from the history kept over the last ``baseline_s`` on every call, so it clears as soon
        as the newest samples show progress again.
        """
        with self._lock:
            samples = list(self._histories.get(model_id, ()))
        return judge_progress(samples, runtime, self._thresholds)

    def node_of(self, model_id: str) -> str | None:
        """The node the newest sample of ``model_id`` came from."""
        with self._lock:
            return self._node_of.get(model_id)

    def retain(self, model_ids: Iterable[str]) -> None:
        """Forget the history of every model not in ``model_ids`` (deleted from the registry, say)."""
        keep = set(model_ids)
        with self._lock:
            for model_id in [known for known in self._histories if known not in keep]:
                del self._histories[model_id]
                self._node_of.pop(model_id, None)

    async def _poll_quietly(self, record: NodeRecord) -> None:
        try:
            await self.poll_node(record)
        except NodeError as exc:
            # The node monitor reports reachability; a missed telemetry read only leaves a gap.
            _logger.debug("telemetry of node %s not read: %s", record.id, exc)

    def _merge_host(self, node_id: str, samples: Iterable[HostGpuSample]) -> None:
        history = self._hosts.get(node_id)
        if history is None:
            history = self._hosts[node_id] = deque(maxlen=self._capacity)
        for sample in sorted(samples, key=lambda sample: sample.at):
            newest = self._since.get(node_id)
            self._since[node_id] = sample.at if newest is None else max(newest, sample.at)
            if not history or sample.at > history[-1].at:
                history.append(sample)

    def _merge(self, node_id: str, model_id: str, samples: Iterable[ModelMetrics]) -> int:
        history = self._histories.get(model_id)
        if history is None:
            history = self._histories[model_id] = deque(maxlen=self._capacity)
        added = 0
        for sample in sorted(samples, key=lambda sample: sample.at):
            newest = self._since.get(node_id)
            self._since[node_id] = sample.at if newest is None else max(newest, sample.at)
            previous = history[-1] if history else None
            if previous is not None and sample.at <= previous.at:
                continue  # already kept (an overlapping read) or older than what is kept
            if previous is not None and self._node_of.get(model_id) != node_id:
                previous = None  # the model moved: another node's counters say nothing about this one
            history.append(_with_rates(sample.model_copy(update={"model_id": model_id}), previous))
            self._node_of[model_id] = node_id
            added += 1
        return added
