"""Jobs: benchmarks that hold their node in maintenance, one at a time per node.

:class:`BenchmarkJobs` starts, reports and cancels jobs over a :class:`JobHost` (the master's side);
:class:`MaintenanceState` is what the router's maintenance gate and the health monitor read, persisted
in ``{data}/maintenance.json`` and cleared at boot.
"""

from ._gpu_check import (
    DEFAULT_GPU_READ_TIMEOUT_S,
    DEFAULT_GPU_SAMPLE_INTERVAL_S,
    DEFAULT_GPU_SAMPLE_S,
    GPU_BUSY_NOTE,
    GPU_BUSY_PERCENT,
    GpuCheck,
    GpuLoad,
    GpuSampler,
)
from ._host import JobHost, JobTarget, NodeModel
from ._jobs import (
    DEFAULT_COUNTER_WAIT_S,
    DEFAULT_DRAIN_TIMEOUT_S,
    PRESETS,
    BenchmarkJobs,
    estimate_seconds,
    paced_eta,
)
from ._maintenance import (
    MAINTENANCE_FILE_NAME,
    MaintenanceDocument,
    MaintenanceState,
    NodeMaintenance,
    Notice,
)
from ._tasks import JobTasks

__all__ = [
    "DEFAULT_COUNTER_WAIT_S",
    "DEFAULT_DRAIN_TIMEOUT_S",
    "DEFAULT_GPU_READ_TIMEOUT_S",
    "DEFAULT_GPU_SAMPLE_INTERVAL_S",
    "DEFAULT_GPU_SAMPLE_S",
    "GPU_BUSY_NOTE",
    "GPU_BUSY_PERCENT",
    "MAINTENANCE_FILE_NAME",
    "PRESETS",
    "BenchmarkJobs",
    "GpuCheck",
    "GpuLoad",
    "GpuSampler",
    "JobHost",
    "JobTarget",
    "JobTasks",
    "MaintenanceDocument",
    "MaintenanceState",
    "NodeMaintenance",
    "NodeModel",
    "Notice",
    "estimate_seconds",
    "paced_eta",
]
