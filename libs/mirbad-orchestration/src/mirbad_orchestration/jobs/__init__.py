"""Jobs: one node-scoped runner for every kind of job, each holding its node in maintenance.

:class:`NodeJobs` runs one job at a time per node, whatever its kind (:class:`JobKind`, each job's
:class:`JobWork`): it holds the node, reports progress, cancels, and releases the node however the job
ends. :class:`BenchmarkJobs` is the benchmark kind (the tuning kind is in
:mod:`mirbad_orchestration.tuning`); both reach the fleet through a :class:`JobHost` (the master's side);
:class:`MaintenanceState` is what the router's maintenance gate and the health monitor read, persisted
in ``{data}/maintenance.json`` and cleared at boot.
"""

from ._benchmark_jobs import (
    BENCHMARK,
    DEFAULT_COUNTER_WAIT_S,
    DEFAULT_DRAIN_TIMEOUT_S,
    PRESETS,
    BenchmarkJobs,
    estimate_seconds,
    paced_eta,
)
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
from ._maintenance import (
    MAINTENANCE_FILE_NAME,
    MaintenanceDocument,
    MaintenanceState,
    NodeMaintenance,
    Notice,
)
from ._runner import JobEnd, JobKind, JobView, JobWork, NodeJobs, RunningJob
from ._tasks import JobTasks

__all__ = [
    "BENCHMARK",
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
    "JobEnd",
    "JobHost",
    "JobKind",
    "JobTarget",
    "JobTasks",
    "JobView",
    "JobWork",
    "MaintenanceDocument",
    "MaintenanceState",
    "NodeJobs",
    "NodeMaintenance",
    "NodeModel",
    "Notice",
    "RunningJob",
    "estimate_seconds",
    "paced_eta",
]
