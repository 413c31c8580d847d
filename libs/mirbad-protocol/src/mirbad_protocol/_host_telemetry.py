"""What a node's telemetry says about the host beside its models: the GPU memory of its host services.

Each telemetry pass that lists the GPU's compute processes puts every process on its model first (its
container, its server's process tree); what is left and runs in a systemd service is summed per
service here, so the Overview can show the GPU's memory as models plus named services. A sample is a
whole reading: a service absent from it held no GPU memory at that moment.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final

from pydantic import Field

from ._wire import WireModel

__all__ = ["GPU_MEMORY_FROM_BUDGET", "HostGpuSample", "ServiceGpuMemory"]

GPU_MEMORY_FROM_BUDGET: Final = "budget"
"""A model sample's ``gpuMemorySource`` when its GPU memory is its budget, not a measure: on a node with
an NVIDIA GPU whose compute processes could not be listed (hostd missing, older or failing, and no
working nvidia-smi beside the agent). A reader draws it apart from measured figures."""


class ServiceGpuMemory(WireModel):
    """One host service's GPU memory at one reading.

    Attributes:
        unit: the innermost ``.service`` unit of its processes' cgroups (``ollama.service``).
        name: what people call it: hostd's whitelist display name, else the unit.
        gpu_memory_bytes: its compute processes' GPU memory summed; None where the driver reports no
            per-process size (``[N/A]``) for every one of them.
    """

    unit: str
    name: str
    gpu_memory_bytes: Annotated[int, Field(ge=0)] | None = None


class HostGpuSample(WireModel):
    """The host services holding GPU memory at one telemetry pass, and who listed the processes.

    Attributes:
        at: when the GPU processes were read.
        source: who listed them (``hostd``, ``nvidia-smi``); text, so a newer agent's source still reads.
        services: every service with a compute process, by unit; empty when none has one.
    """

    at: datetime
    source: str
    services: list[ServiceGpuMemory] = Field(default_factory=list)
