"""Placement by GPU: the GPUs a node reports, offered by the editor and checked when a model is saved.

A placement's ``gpuUuids`` narrow a model to some of its node's discrete GPUs; the agent's admission
then charges the budget to those GPUs only, a container asks Docker for exactly those devices and a
native process sees only them (``CUDA_VISIBLE_DEVICES``). The GPUs come from the node's telemetry as
the status cache last holds it (nvidia-smi, read by the agent), never from a fresh call: a save does
not wait on a node. A node whose memory was never read (enrolled but not answered yet) has its
placement saved unchecked, as the memory estimate does for what cannot be known; its agent's admission
refuses an unknown GPU at the start all the same (422 ``spec_rejected``).
"""

from __future__ import annotations

from typing import Final

from mirbad_master._composition import MasterServices
from mirbad_master.exceptions import UnknownGpuError
from mirbad_protocol import GpuMemory, ModelDefinition

__all__ = ["GPUS_FIELD", "check_gpu_placement", "gpu_label", "gpu_options", "node_gpus"]

GPUS_FIELD: Final = "placement.gpuUuids"
"""The field a refusal names (wire spelling)."""


def node_gpus(services: MasterServices, node_id: str) -> list[GpuMemory] | None:
    """The node's discrete GPUs as its telemetry last reported them; None when it was never read."""
    state = services.cache.node(node_id) if node_id else None
    if state is None or state.memory is None:
        return None
    return list(state.memory.gpus)


def check_gpu_placement(services: MasterServices, definition: ModelDefinition) -> None:
    """Refuse a placement on a GPU its node does not report.

    Raises:
        UnknownGpuError: naming the first such UUID (HTTP 422 ``unknown_gpu``, ``placement.gpuUuids``).
    """
    placement = definition.placement
    if placement is None or not placement.gpu_uuids:
        return
    gpus = node_gpus(services, placement.node_id)
    if gpus is None:
        return
    known = [gpu.uuid for gpu in gpus]
    for uuid in placement.gpu_uuids:
        if uuid not in known:
            raise UnknownGpuError(placement.node_id, uuid, known)


def gpu_label(gpu: GpuMemory) -> str:
    """How the editor names a GPU: its index, name and memory, then its UUID."""
    name = gpu.name or "GPU"
    return f"GPU {gpu.index} · {name} · {gpu.total_mib / 1024:.0f} GiB ({gpu.uuid})"


def gpu_options(gpus: list[GpuMemory] | None, chosen: list[str]) -> dict[str, str]:
    """The GPU select's options, UUID to label: the node's GPUs, then chosen ones it does not report.

    A saved UUID the node no longer reports (a GPU swapped out) stays offered, labelled so, so the
    editor opens and the operator sees what to change.
    """
    options = {gpu.uuid: gpu_label(gpu) for gpu in gpus or []}
    unknown = "telemetry not read yet" if gpus is None else "not reported by the node"
    options.update({uuid: f"{uuid} ({unknown})" for uuid in chosen if uuid not in options})
    return options
