"""The Overview's memory per model: what each model measurably held over the last hour, from telemetry.

The telemetry collector already keeps every model's samples on the master (an hour of them); each
sample carries the model's GPU memory where its agent could list the GPU's compute processes (from
hostd, else from nvidia-smi on the node), and the memory the runtime measured otherwise (a native
server's resident set, a container's memory usage). A point is the GPU's figure when the sample has
one, else the runtime's, and the two go on separate lines (``model · GPU``, ``model · RAM``), so a line
never mixes what the GPU reports with what the kernel does. Budgets, which are estimates, are not drawn.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal, Protocol

from mirbad_protocol import ModelMetrics

from ._format import DASH

__all__ = ["GPU", "RAM", "MemoryKind", "ModelMemoryLine", "gpu_memory_text", "model_memory_lines"]

MemoryKind = Literal["GPU", "RAM"]
"""Which figure a line plots: the GPU's compute processes, or the runtime's measure."""
GPU: Final[MemoryKind] = "GPU"
"""The model's compute processes as the GPU reports them."""
RAM: Final[MemoryKind] = "RAM"
"""The model's resident set (native) or container memory usage, where no GPU processes were read."""

_GIB: Final = 1024**3


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


def model_memory_lines(telemetry: TelemetryHistory, model_ids: Iterable[str]) -> list[ModelMemoryLine]:
    """The lines of every model in ``model_ids`` that has a measured sample, GPU before RAM."""
    lines: list[ModelMemoryLine] = []
    for model_id in model_ids:
        points: dict[MemoryKind, list[tuple[datetime, float]]] = {GPU: [], RAM: []}
        for sample in telemetry.history(model_id):
            measured = _measured(sample)
            if measured is not None:
                points[measured[0]].append((sample.at, measured[1] / _GIB))
        lines += [ModelMemoryLine(model_id, kind, found) for kind, found in points.items() if found]
    return lines


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
    if sample.gpu_memory_source is not None and sample.gpu_memory_bytes is not None:
        return GPU, sample.gpu_memory_bytes
    if sample.memory_bytes is not None:
        return RAM, sample.memory_bytes
    return None
