"""The Overview's memory per model: what each model measurably held over the last hour, from telemetry.

The telemetry collector already keeps every model's samples on the master (an hour of them); each
sample carries the model's GPU memory where its agent could list the GPU's compute processes (from
hostd, else from nvidia-smi on the node), and the memory the runtime measured otherwise (a native
server's resident set, a container's memory usage). A point is the GPU's figure when the sample has
one, else the runtime's, and the two go on separate lines (``model · GPU``, ``model · RAM``), so a line
never mixes what the GPU reports with what the kernel does. A budget is drawn only where the agent
sent it in place of the GPU's figure (source ``budget``: a node with a GPU whose processes could not
be listed), on a dashed line of its own (``model · budget``), never joined to a measured one.

Each node's host samples add one line per host service holding GPU memory (``svc · ollama``): the
processes no model owns, summed per systemd service, so the GPU's memory reads as models plus named
services. A host sample is a whole reading, so a service missing from one held nothing then (0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import Final, Literal, Protocol

from mirbad_protocol import ModelMetrics
from mirbad_protocol.agent import GPU_MEMORY_FROM_BUDGET, HostGpuSample

from ._format import DASH

__all__ = [
    "BUDGET",
    "GPU",
    "RAM",
    "MemoryKind",
    "ModelMemoryLine",
    "ServiceMemoryLine",
    "gpu_memory_text",
    "model_memory_lines",
    "service_memory_lines",
    "with_gaps",
]

MemoryKind = Literal["GPU", "RAM", "budget"]
"""Which figure a line plots: the GPU's compute processes, the runtime's measure, or the budget."""
GPU: Final[MemoryKind] = "GPU"
"""The model's compute processes as the GPU reports them."""
RAM: Final[MemoryKind] = "RAM"
"""The model's resident set (native) or container memory usage, where no GPU processes were read."""
BUDGET: Final[MemoryKind] = "budget"
"""The model's budget, sent where its node has a GPU whose processes could not be listed (an estimate)."""

_GIB: Final = 1024**3
_GAP_SPACINGS: Final = 3
"""A silence longer than this many of a line's usual sample spacings is a gap (the model did not run)."""
_MIN_GAP_S: Final = 1.0


class TelemetryHistory(Protocol):
    """What the lines read: the master's telemetry collector."""

    def history(self, model_id: str) -> list[ModelMetrics]:
        """The kept samples of ``model_id``, oldest first."""
        ...


@dataclass(frozen=True)
class ModelMemoryLine:
    """One model's measured memory of one kind over time.

    Attributes:
        model_id: the model.
        kind: :data:`GPU` or :data:`RAM`.
        points: ``(time, GiB)``, oldest first.
    """

    model_id: str
    kind: MemoryKind
    points: list[tuple[datetime, float]]

    @property
    def name(self) -> str:
        """The legend's name: ``model · GPU``."""
        return f"{self.model_id} · {self.kind}"

    @property
    def dashed(self) -> bool:
        """Drawn dashed: an estimate (the budget), not a measure."""
        return self.kind == BUDGET


@dataclass(frozen=True)
class ServiceMemoryLine:
    """One host service's GPU memory over time.

    Attributes:
        service: its name (hostd's display name, else its unit).
        node_id: its node, named in the legend only when several nodes report host services.
        points: ``(time, GiB)``, oldest first.
    """

    service: str
    node_id: str | None
    points: list[tuple[datetime, float]]

    @property
    def name(self) -> str:
        """The legend's name: ``svc · ollama`` (``svc · ollama · node-2`` with several nodes)."""
        return f"svc · {self.service}" + (f" · {self.node_id}" if self.node_id else "")

    @property
    def dashed(self) -> bool:
        """Never: a service's figure is always the GPU's own."""
        return False


def service_memory_lines(hosts: Mapping[str, list[HostGpuSample]]) -> list[ServiceMemoryLine]:
    """A line per host service that held GPU memory in any kept sample, by node, then by name.

    Args:
        hosts: each node's host samples, oldest first (the telemetry collector's ``host_histories``).
    """
    with_services = {node: samples for node, samples in hosts.items() if any(s.services for s in samples)}
    lines: list[ServiceMemoryLine] = []
    for node_id, samples in sorted(with_services.items()):
        names = sorted({service.name for sample in samples for service in sample.services})
        for name in names:
            points = [
                (sample.at, used / _GIB)
                for sample in samples
                if (used := _service_bytes(sample, name)) is not None
            ]
            if points:
                lines.append(ServiceMemoryLine(name, node_id if len(with_services) > 1 else None, points))
    return lines


def _service_bytes(sample: HostGpuSample, name: str) -> int | None:
    # Absent from a whole reading: nothing on the GPU then. Present with no size: unknown, no point.
    found = [service.gpu_memory_bytes for service in sample.services if service.name == name]
    if not found:
        return 0
    known = [used for used in found if used is not None]
    return sum(known) if known else None


def model_memory_lines(telemetry: TelemetryHistory, model_ids: Iterable[str]) -> list[ModelMemoryLine]:
    """The lines of every model in ``model_ids`` that has a drawable sample: GPU, RAM, then budget."""
    lines: list[ModelMemoryLine] = []
    for model_id in model_ids:
        points: dict[MemoryKind, list[tuple[datetime, float]]] = {GPU: [], RAM: [], BUDGET: []}
        for sample in telemetry.history(model_id):
            measured = _measured(sample)
            if measured is not None:
                points[measured[0]].append((sample.at, measured[1] / _GIB))
        lines += [ModelMemoryLine(model_id, kind, found) for kind, found in points.items() if found]
    return lines


def with_gaps(points: list[tuple[datetime, float]]) -> list[tuple[datetime, float | None]]:
    """``points`` with a break (a None value, which ECharts does not join across) in each silence.

    A model is sampled only while it runs, so a stopped period is a stretch without samples; drawn
    as it is, the line would join the last value before the stop to the first after it, as if the model
    had held memory all along. A silence is longer than :data:`_GAP_SPACINGS` times the line's median
    spacing (at least a second), so it follows whatever cadence the telemetry has.
    """
    if len(points) < 3:
        return list(points)
    spacings = sorted((b[0] - a[0]).total_seconds() for a, b in pairwise(points))
    gap_s = max(_GAP_SPACINGS * spacings[len(spacings) // 2], _MIN_GAP_S)
    broken: list[tuple[datetime, float | None]] = [points[0]]
    for before, after in pairwise(points):
        if (after[0] - before[0]).total_seconds() > gap_s:
            broken.append((before[0] + (after[0] - before[0]) / 2, None))
        broken.append(after)
    return broken


def gpu_memory_text(sample: ModelMetrics | None) -> str:
    """The Overview table's GPU cell: ``3.2 GiB (hostd)``, or a dash where no GPU processes were read."""
    if sample is None or sample.gpu_memory_source is None:
        return DASH
    if sample.gpu_memory_bytes is None:
        return f"not reported ({sample.gpu_memory_source})"
    value = sample.gpu_memory_bytes / _GIB
    size = f"{value * 1024:.0f} MiB" if value < 1 else f"{value:.1f} GiB"
    return f"{size} ({sample.gpu_memory_source})"


def _measured(sample: ModelMetrics) -> tuple[MemoryKind, int] | None:
    # A budget stands in for the GPU's figure: the RAM measure of the same sample is not drawn then,
    # so each sample is one point, and the estimate never lands on a measured line.
    if sample.gpu_memory_source == GPU_MEMORY_FROM_BUDGET and sample.gpu_memory_bytes is not None:
        return BUDGET, sample.gpu_memory_bytes
    if sample.gpu_memory_source is not None and sample.gpu_memory_bytes is not None:
        return GPU, sample.gpu_memory_bytes
    if sample.memory_bytes is not None:
        return RAM, sample.memory_bytes
    return None
