"""The Overview's memory history: the fleet's and each node's used memory over the last hour.

The node monitor keeps only each node's latest memory snapshot; this samples the status cache on a
cadence into bounded rings (the oldest samples go first), so the plot has a past. A snapshot already
sampled (same ``taken_at``) is not counted twice, and a node whose agent does not answer leaves a gap.

The fleet line is summed from the nodes' own samples, not from what one look at the cache finds: nodes
are read at different moments and a poll can miss one, so the sum is bucketed by sample time and each
node counts with its last value until it has been silent for ``carry_s`` (then it has left the sum,
as an unreachable node leaves the fleet's total). A node read late never makes the fleet line dip.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

import anyio

from mirbad_orchestration.fleet import NodeState, StatusCache

__all__ = ["DEFAULT_BUCKET_S", "DEFAULT_CARRY_S", "DEFAULT_SAMPLES", "FLEET", "MemoryHistory", "MemorySample"]

DEFAULT_SAMPLES: Final = 720
"""Samples kept per series: an hour at one every five seconds."""
DEFAULT_BUCKET_S: Final = 5.0
"""The fleet line's resolution: node samples within one bucket are summed into one point."""
DEFAULT_CARRY_S: Final = 30.0
"""How long a node that was not read again still counts in the fleet line with its last value."""
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
        clock: the current time, aware (stamps a snapshot that carries no time of its own).
        bucket_s: the fleet line's bucket width in seconds.
        carry_s: how long a silent node keeps counting in the fleet line with its last value.
    """

    def __init__(
        self,
        capacity: int = DEFAULT_SAMPLES,
        *,
        clock: Callable[[], datetime] | None = None,
        bucket_s: float = DEFAULT_BUCKET_S,
        carry_s: float = DEFAULT_CARRY_S,
    ) -> None:
        self._capacity = capacity
        self._clock = clock or (lambda: datetime.now(UTC))
        self._bucket_s = bucket_s
        self._carry_s = carry_s
        self._lock = threading.Lock()
        self._series: dict[str, deque[MemorySample]] = {}
        self._taken: dict[str, datetime | None] = {}

    def sample(self, states: Iterable[NodeState]) -> None:
        """Record every reachable node's latest snapshot, then the fleet's sum for the newest bucket."""
        now = self._clock()
        with self._lock:
            for state in states:
                memory = state.memory
                if not state.reachable or memory is None:
                    continue
                node_used = max(memory.total_gib - memory.available_gib, 0.0)
                self._append(state.node_id, MemorySample(memory.taken_at or now, node_used, memory.total_gib))
            self._sum_fleet()

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

    def _sum_fleet(self) -> None:
        lasts = [series[-1] for name, series in self._series.items() if name != FLEET and series]
        if not lasts:
            return
        newest = max(last.at for last in lasts)
        counted = [last for last in lasts if (newest - last.at).total_seconds() <= self._carry_s]
        # Stamped with the newest sample summed, so with one node the fleet line lies on the node's.
        point = MemorySample(newest, sum(s.used_gib for s in counted), sum(s.total_gib for s in counted))
        fleet = self._series.setdefault(FLEET, deque(maxlen=self._capacity))
        if fleet and self._bucket(fleet[-1].at) >= self._bucket(newest):
            fleet[-1] = point  # the same bucket again: its sum with the newer values
        else:
            fleet.append(point)

    def _bucket(self, at: datetime) -> datetime:
        seconds = at.timestamp()
        return datetime.fromtimestamp(seconds - seconds % self._bucket_s, tz=UTC)

    def _append(self, name: str, sample: MemorySample) -> None:
        if name != FLEET:
            if self._taken.get(name) == sample.at:
                return  # the monitor has not read this node again since the last sample
            self._taken[name] = sample.at
        series = self._series.setdefault(name, deque(maxlen=self._capacity))
        series.append(sample)
