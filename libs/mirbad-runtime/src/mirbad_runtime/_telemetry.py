"""The agent's telemetry ring: the recent metrics samples of each model, with rates between them.

Beside them it keeps the node's host samples (the GPU memory of its host services, one per telemetry
pass that read the GPU's processes), bounded by the same capacity.
"""

from __future__ import annotations

import threading
from collections import deque
from datetime import datetime
from typing import Final

from mirbad_protocol import ModelMetrics
from mirbad_protocol.agent import HostGpuSample

from ._metrics_reader import with_rates

__all__ = ["DEFAULT_RING_CAPACITY", "TelemetryRing"]

DEFAULT_RING_CAPACITY: Final = 360
"""Samples kept per model: half an hour at one scrape every five seconds."""


class TelemetryRing:
    """A bounded history of :class:`~mirbad_protocol.ModelMetrics` per model.

    :meth:`add` fills in each new sample's token rates from the model's previous sample (see
    :func:`~mirbad_runtime.with_rates`), so every stored sample after the first carries rates. When a
    model's ring is full the oldest sample goes.

    Every method is synchronous and holds a plain lock only for a few list operations, so tasks on the
    event loop and worker threads (``anyio.to_thread``) can share one ring; nothing here awaits.

    Args:
        capacity: how many samples are kept per model.
    """

    def __init__(self, capacity: int = DEFAULT_RING_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("a telemetry ring holds at least one sample per model")
        self.capacity = capacity
        self._rings: dict[str, deque[ModelMetrics]] = {}
        self._host: deque[HostGpuSample] = deque(maxlen=capacity)
        self._lock = threading.Lock()

    def add(self, sample: ModelMetrics) -> ModelMetrics:
        """Store a fresh scrape of ``sample.model_id`` and return it with its rates filled in.

        A sample no newer than the model's latest gets no rates (time did not move forward) but is
        still kept, so a clock step backwards never hides the model.
        """
        with self._lock:
            ring = self._rings.get(sample.model_id)
            if ring is None:
                ring = self._rings[sample.model_id] = deque(maxlen=self.capacity)
            stored = with_rates(sample, ring[-1] if ring else None)
            ring.append(stored)
        return stored

    def add_host(self, sample: HostGpuSample) -> None:
        """Store one pass's host sample; when full the oldest goes."""
        with self._lock:
            self._host.append(sample)

    def host_history(self, *, since: datetime | None = None, limit: int | None = None) -> list[HostGpuSample]:
        """The kept host samples, oldest first, taken after ``since``, the newest ``limit`` of them."""
        if limit is not None and limit < 0:
            raise ValueError("limit cannot be negative")
        with self._lock:
            samples = list(self._host)
        if since is not None:
            samples = [sample for sample in samples if sample.at > since]
        if limit is not None:
            samples = samples[-limit:] if limit else []
        return samples

    def latest(self, model_id: str) -> ModelMetrics | None:
        """The newest sample of ``model_id``, or None when none is kept."""
        with self._lock:
            ring = self._rings.get(model_id)
            return ring[-1] if ring else None

    def history(
        self, model_id: str, *, since: datetime | None = None, limit: int | None = None
    ) -> list[ModelMetrics]:
        """The kept samples of ``model_id``, oldest first.

        Args:
            model_id: the model.
            since: keep only samples taken after this moment.
            limit: keep only the newest ``limit`` of those.
        """
        if limit is not None and limit < 0:
            raise ValueError("limit cannot be negative")
        with self._lock:
            samples = list(self._rings.get(model_id, ()))
        if since is not None:
            samples = [sample for sample in samples if sample.at > since]
        if limit is not None:
            samples = samples[-limit:] if limit else []
        return samples

    def snapshot(self) -> dict[str, ModelMetrics]:
        """The newest sample of every model, by model id (in id order)."""
        with self._lock:
            return {model_id: self._rings[model_id][-1] for model_id in sorted(self._rings)}

    def model_ids(self) -> list[str]:
        """The models with at least one kept sample, in id order."""
        with self._lock:
            return sorted(self._rings)

    def forget(self, model_id: str) -> None:
        """Drop every sample of ``model_id`` (it stopped); a model that is not kept is ignored.

        Forgetting matters for rates too: a model started again begins its counters at zero, and its
        first sample must not be compared with the previous run's last one.
        """
        with self._lock:
            self._rings.pop(model_id, None)

    def retain(self, model_ids: set[str]) -> None:
        """Forget every model not in ``model_ids`` (for example the models that are Ready now)."""
        with self._lock:
            for model_id in [kept for kept in self._rings if kept not in model_ids]:
                del self._rings[model_id]
