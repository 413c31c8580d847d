"""What a node reports: model states and statuses, memory, metrics, and the router's counters."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field

from ._definition import RuntimeKind
from ._launch import GpuSelection
from ._wire import WireModel

__all__ = ["GpuMemory", "MemorySnapshot", "ModelMetrics", "ModelState", "ModelStatus", "RouterModelStats"]


class ModelState(StrEnum):
    """The life-cycle state of a model, always derived from the runtime (Docker, the process table).

    ``Unknown`` is the master's, never an agent's: the model's node does not answer, so nobody can say
    (the status's ``error`` says why).
    """

    STOPPED = "Stopped"
    STARTING = "Starting"
    READY = "Ready"
    STOPPING = "Stopping"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class ModelStatus(WireModel):
    """One model's state on its node, as the agent derives it on every read."""

    id: str
    served_name: str
    state: ModelState
    runtime: RuntimeKind = "vllm"
    node_id: str | None = None
    port: int | None = None
    # The process id of a native model (the process driver's), so an operator can find it; additive.
    pid: int | None = None
    error: str | None = None
    restart_pending: bool = False
    config_hash: str | None = None
    budget_gib: float | None = Field(default=None, alias="budgetGiB")
    started_at: datetime | None = None
    # What the running instance runs with, read back by its node: a container's command (vLLM's
    # arguments), a native process's command line without the executable. None: unknown or older agent.
    argv: list[str] | None = None
    # The GPUs the running instance was given, read back by its node (a container's device request, a
    # native process's record), so admission charges an adopted model to those GPUs only. None: all of
    # them, or unknown (an older agent); either way admission counts the model on every GPU.
    gpus: GpuSelection | None = None
    # The master's judgement of a Ready model from its metrics history (never an agent's): Stalled
    # (requests running, nothing generated for a window) or Slow (well under its own recent speed at a
    # similar load), with the figures that made it; absent from every payload while it progresses.
    progress: Literal["Stalled", "Slow"] | None = Field(default=None, exclude_if=lambda value: value is None)
    progress_reason: str | None = Field(default=None, exclude_if=lambda value: value is None)


class GpuMemory(WireModel):
    """One discrete GPU as nvidia-smi reports it.

    ``utilization_percent`` is nvidia-smi's ``utilization.gpu`` at the reading: the share of the last
    sample period in which a kernel ran, 0 to 100. None where the driver reports none (``[N/A]``, some
    virtual GPUs and MIG slices) or the agent is older; it is read with the memory, not attributed to
    any model.
    """

    index: Annotated[int, Field(ge=0)]
    uuid: str
    name: str = ""
    total_mib: Annotated[float, Field(ge=0)] = Field(alias="totalMiB")
    used_mib: Annotated[float, Field(ge=0)] = Field(default=0.0, alias="usedMiB")
    utilization_percent: Annotated[float, Field(ge=0, le=100)] | None = None


class MemorySnapshot(WireModel):
    """A node's memory at one moment; admission compares budgets with ``available_gib - reserve_gib``."""

    total_gib: Annotated[float, Field(ge=0)] = Field(alias="totalGiB")
    available_gib: Annotated[float, Field(ge=0)] = Field(alias="availableGiB")
    reserve_gib: Annotated[float, Field(ge=0)] = Field(default=0.0, alias="reserveGiB")
    unified: bool = True
    gpus: list[GpuMemory] = Field(default_factory=list)
    taken_at: datetime | None = None


class ModelMetrics(WireModel):
    """One scrape of a model's /metrics; rates come from the difference of two consecutive scrapes.

    ``memory_bytes`` is what the model's server measurably uses at the scrape (a native process's
    resident set, a container's memory usage), None where the agent cannot measure it or is older.
    ``prefix_cache_hits_total`` is the server's counter of prompt tokens served from its prefix cache
    (vLLM's ``vllm:prefix_cache_hits_total``), None where the server has none (llama-server).
    ``decode_calls_total`` is llama-server's count of decode steps (``llamacpp:n_decode_total``: prompt
    batches and generated tokens alike), which moves while requests run, where its token counters only
    move when a request ends; None for other servers and older agents.
    ``gpu_memory_bytes`` is the GPU memory of the model's compute processes as the GPU reports them
    (nvidia-smi's compute apps in its container, or its server's process and every process below it),
    and ``gpu_memory_source`` who listed them (``hostd``, or ``nvidia-smi`` run by the agent itself);
    on a node with an NVIDIA GPU whose processes could not be listed the size is the model's budget
    and the source ``budget`` (an estimate, not a measure); both None where the node has no NVIDIA
    GPU or the agent is older, and the size None also where the driver reports no per-process memory.
    """

    model_id: str
    at: datetime
    requests_running: float = 0.0
    requests_waiting: float = 0.0
    kv_cache_usage: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    prompt_tokens_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    memory_bytes: Annotated[int, Field(ge=0)] | None = None
    prefix_cache_hits_total: float | None = None
    decode_calls_total: float | None = Field(default=None, exclude_if=lambda value: value is None)
    gpu_memory_bytes: Annotated[int, Field(ge=0)] | None = None
    # Text, not a Literal: a newer agent's source must still read on an older master.
    gpu_memory_source: str | None = None


class RouterModelStats(WireModel):
    """The router's counters for one served name."""

    served_name: str
    total: Annotated[int, Field(ge=0)] = 0
    failed: Annotated[int, Field(ge=0)] = 0
    in_flight: Annotated[int, Field(ge=0)] = 0
