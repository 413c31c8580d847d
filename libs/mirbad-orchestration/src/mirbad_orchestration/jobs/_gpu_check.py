"""The GPU check before a benchmark: the node's GPUs sampled for a few seconds, busy above 10 %.

When the check runs, the job has drained its node: the model it measures is idle (maintenance keeps
``/v1`` away from it and it has nothing in flight) and so are the node's other Ready models. Whatever
kept a GPU busy then was not a request to Mirbad: another program on the node, a job of another user.
Only where Mirbad itself may have been at work (the drain gave up on in-flight requests, a model of
the node was starting) is the load not blamed on others, and the note names that instead.

The samples are fresh readings asked of the node's agent (one nvidia-smi run each), not the master's
telemetry, whose 10 s cadence would give at most one sample in the window.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Final

import anyio

from mirbad_protocol import GpuMemory, MirbadError

__all__ = [
    "DEFAULT_GPU_READ_TIMEOUT_S",
    "DEFAULT_GPU_SAMPLE_INTERVAL_S",
    "DEFAULT_GPU_SAMPLE_S",
    "GPU_BUSY_NOTE",
    "GPU_BUSY_PERCENT",
    "GpuCheck",
    "GpuLoad",
    "GpuSampler",
]

DEFAULT_GPU_SAMPLE_S: Final = 5.0
"""How long the check samples the node's GPUs (the spec's 5 s)."""
DEFAULT_GPU_SAMPLE_INTERVAL_S: Final = 1.0
"""How long the check waits between two readings."""
DEFAULT_GPU_READ_TIMEOUT_S: Final = 15.0
"""The bound of one reading (the agent gives nvidia-smi 10 s)."""
GPU_BUSY_PERCENT: Final = 10.0
"""A GPU whose mean utilization over the window is above this is busy."""
GPU_BUSY_NOTE: Final = "GPU busy with work outside Mirbad"
"""The noisy note of a busy GPU on a drained node."""

_logger = logging.getLogger(__name__)
_NO_UTILIZATION: Final = "skipped: the node agent does not report GPU utilization"


@dataclass(frozen=True)
class GpuLoad:
    """One GPU's utilization over the window.

    Attributes:
        index: nvidia-smi's index.
        uuid: the GPU's UUID.
        mean_percent: the mean of its readings.
        max_percent: the highest reading.
        readings: how many readings reported a utilization.
    """

    index: int
    uuid: str
    mean_percent: float
    max_percent: float
    readings: int

    @property
    def busy(self) -> bool:
        """Whether its mean is above :data:`GPU_BUSY_PERCENT` (the mean: one spike is not a workload)."""
        return self.mean_percent > GPU_BUSY_PERCENT

    def describe(self) -> str:
        """``GPU 0: 45 % mean, 80 % max``."""
        return f"GPU {self.index}: {self.mean_percent:.0f} % mean, {self.max_percent:.0f} % max"


@dataclass(frozen=True)
class GpuCheck:
    """What the check found.

    Attributes:
        verdict: the result's ``gpu``: ``idle``, ``busy`` or ``skipped: <why>``.
        loads: each GPU that reported a utilization.
    """

    verdict: str
    loads: tuple[GpuLoad, ...] = ()

    def noisy(self, own_work: str | None = None) -> list[str]:
        """The note for the result's ``noisy``: none unless busy.

        Args:
            own_work: what of Mirbad's own may have loaded the GPUs during the window (``model 'x' was
                starting``), None when nothing: then the load is work outside Mirbad.
        """
        busy = [load for load in self.loads if load.busy]
        if self.verdict != "busy" or not busy:
            return []
        note = GPU_BUSY_NOTE if own_work is None else f"GPU busy while {own_work}"
        return [f"{note} ({'; '.join(load.describe() for load in busy)})"]


class GpuSampler:
    """Samples a node's GPUs through ``read`` (a fresh reading of its discrete GPUs per call).

    A reading at the start and then evenly spaced ones, at most an interval apart, until the window is
    covered: 6 readings a second apart over 5 s by default. The count follows from the window and the
    interval, not from a clock, so the time the readings take stretches the window a little rather
    than dropping one.

    Args:
        read: returns the node's GPUs now; raises :class:`~mirbad_protocol.MirbadError` when the node
            or its nvidia-smi cannot say.
        window_s: how long to sample.
        interval_s: the wait between two readings.
        read_timeout_s: the bound of one reading.
    """

    def __init__(
        self,
        read: Callable[[], Awaitable[Sequence[GpuMemory]]],
        *,
        window_s: float = DEFAULT_GPU_SAMPLE_S,
        interval_s: float = DEFAULT_GPU_SAMPLE_INTERVAL_S,
        read_timeout_s: float = DEFAULT_GPU_READ_TIMEOUT_S,
    ) -> None:
        if window_s < 0 or interval_s <= 0 or read_timeout_s <= 0:
            raise ValueError("window_s cannot be negative, interval_s and read_timeout_s must be positive")
        self._read = read
        self._window_s = window_s
        self._interval_s = interval_s
        self._read_timeout_s = read_timeout_s

    async def check(self) -> GpuCheck:
        """Sample for the window and judge.

        Returns:
            ``skipped`` when the node has no GPU, a reading failed or no GPU reports a utilization;
            else ``busy`` or ``idle`` with each GPU's load.
        """
        try:
            readings = await self._sample()
        except (MirbadError, TimeoutError) as exc:
            reason = str(exc) or f"no answer within {self._read_timeout_s:g} s"
            _logger.warning("the GPU check before a benchmark could not read the GPUs: %s", reason)
            return GpuCheck(f"skipped: the node's GPUs could not be read ({reason})")
        if not readings[0]:
            return GpuCheck("skipped: the node has no GPU")
        loads = _loads(readings)
        if not loads:
            return GpuCheck(_NO_UTILIZATION)
        return GpuCheck("busy" if any(load.busy for load in loads) else "idle", loads)

    @property
    def readings(self) -> int:
        """How many readings a check takes (on a node with GPUs)."""
        return 1 + math.ceil(self._window_s / self._interval_s)

    async def _sample(self) -> list[Sequence[GpuMemory]]:
        """A reading now, then one after each interval (none after a ``[]``: the node has no GPU)."""
        count = self.readings
        spacing = self._window_s / (count - 1) if count > 1 else 0.0
        readings = [await self._read_once()]
        while readings[0] and len(readings) < count:
            await anyio.sleep(spacing)
            readings.append(await self._read_once())
        return readings

    async def _read_once(self) -> Sequence[GpuMemory]:
        with anyio.fail_after(self._read_timeout_s):
            return await self._read()


def _loads(readings: list[Sequence[GpuMemory]]) -> tuple[GpuLoad, ...]:
    """Each GPU's mean and max over the readings that report its utilization, in nvidia-smi's order."""
    values: dict[str, list[float]] = {}
    indexes: dict[str, int] = {}
    for reading in readings:
        for gpu in reading:
            indexes.setdefault(gpu.uuid, gpu.index)
            if gpu.utilization_percent is not None:
                values.setdefault(gpu.uuid, []).append(gpu.utilization_percent)
    # fmean of equal values can come out an ulp above them: a mean is never above the max.
    return tuple(
        GpuLoad(indexes[uuid], uuid, min(fmean(found), max(found)), max(found), len(found))
        for uuid, found in sorted(values.items(), key=lambda item: indexes[item[0]])
    )
