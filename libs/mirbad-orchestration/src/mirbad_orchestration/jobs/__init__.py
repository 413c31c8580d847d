"""Jobs: benchmarks that hold their node in maintenance, one at a time per node.

:class:`BenchmarkJobs` starts, reports and cancels jobs over a :class:`JobHost` (the master's side);
:class:`MaintenanceState` is what the router's maintenance gate and the health monitor read, persisted
in ``{data}/maintenance.json`` and cleared at boot.
"""

from ._host import JobHost, JobTarget, NodeModel
from ._jobs import DEFAULT_COUNTER_WAIT_S, DEFAULT_DRAIN_TIMEOUT_S, PRESETS, BenchmarkJobs, estimate_seconds
from ._maintenance import (
    MAINTENANCE_FILE_NAME,
    MaintenanceDocument,
    MaintenanceState,
    NodeMaintenance,
    Notice,
)

__all__ = [
    "DEFAULT_COUNTER_WAIT_S",
    "DEFAULT_DRAIN_TIMEOUT_S",
    "MAINTENANCE_FILE_NAME",
    "PRESETS",
    "BenchmarkJobs",
    "JobHost",
    "JobTarget",
    "MaintenanceDocument",
    "MaintenanceState",
    "NodeMaintenance",
    "NodeModel",
    "Notice",
    "estimate_seconds",
]
