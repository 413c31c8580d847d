"""The Overview's memory history: the fleet's and each node's used memory over the last hour.

The node monitor keeps only each node's latest memory snapshot; this samples the status cache on a
cadence into bounded rings (the oldest samples go first), so the plot has a past. A snapshot already
sampled (same ``taken_at``) is not counted twice, and a node whose agent does not answer leaves a gap.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import anyio

from mirbad_orchestration import NodeState, StatusCache

__all__ = ["DEFAULT_SAMPLES", "FLEET", "MemoryHistory", "MemorySample"]

DEFAULT_SAMPLES: Final = 720
"""Samples kept per series: an hour at one every five seconds."""
FLEET: Final = "fleet"
"""The series of the whole fleet (every reachable node summed)."""


@dataclass(frozen=True)
class MemorySample:
    """Used and total memory at one moment, in GiB."""

    at: datetime
    used_gib: float
    total_gib: float


class MemoryHistory:
    """Bounded per-node and fleet memory series, filled by :meth:`sample` (reads may come from any thread).

    Args:
        capacity: samples kept per series.
        clock: the current time, aware.
    """

    def __init__(
        self, capacity: int = DEFAULT_SAMPLES, *, clock: Callable[[], datetime] | None = None
    ) -> None:
        self._capacity = capacity
        self._clock = clock or (lambda: datetime.now(UTC))
        self._lock = threading.Lock()
        self._series: dict[str, deque[MemorySample]] = {}
        self._taken: dict[str, datetime | None] = {}

    def sample(self, states: Iterable[NodeState]) -> None:
        """Record every reachable node's latest snapshot and the fleet's sum, stamped now."""
        now = self._clock()
        used = total = 0.0
        counted = False
        with self._lock:
            for state in states:
                memory = state.memory
                if not state.reachable or memory is None:
                    continue
                node_used = max(memory.total_gib - memory.available_gib, 0.0)
                used, total, counted = used + node_used, total + memory.total_gib, True
                self._append(state.node_id, MemorySample(memory.taken_at or now, node_used, memory.total_gib))
            if counted:
                self._append(FLEET, MemorySample(now, used, total))

    def series(self, name: str = FLEET) -> list[MemorySample]:
        """The samples of one node (by id) or of the fleet, oldest first."""
        with self._lock:
            return list(self._series.get(name, ()))

    def names(self) -> list[str]:
        """The node ids with samples (the fleet series excluded), sorted."""
        with self._lock:
            return sorted(name for name in self._series if name != FLEET)

    async def run(self, cache: StatusCache, interval_s: float) -> None:
        """Sample ``cache`` every ``interval_s`` seconds until cancelled."""
        while True:
            self.sample(cache.nodes())
            await anyio.sleep(interval_s)

    def _append(self, name: str, sample: MemorySample) -> None:
        if name != FLEET:
            if self._taken.get(name) == sample.at:
                return  # the monitor has not read this node again since the last sample
            self._taken[name] = sample.at
        series = self._series.setdefault(name, deque(maxlen=self._capacity))
        series.append(sample)
