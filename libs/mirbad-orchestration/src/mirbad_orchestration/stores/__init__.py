"""Stores: the master's small files in the data directory, and the audit trail.

:class:`StateFile` is one value (a pydantic document, or any value with its own decode and encode)
behind one lock, replaced atomically on every change; the model and node registries, the recovery
state and the restart pauses are built on it. :class:`AuditLog`
appends who did what to the daily audit files. :class:`JobResults` keeps the results of one job kind
(benchmarks, tuning runs), one file per finished job.
"""

from ._audit import AUDIT_FOLDER_NAME, AuditedJob, AuditEntry, AuditLog, AuditOutcome
from ._job_results import JobResultKind, JobResults, StoredResults, result_stamp
from ._state_file import StateFile, StoreAction, StoreFailure, is_disk_full

__all__ = [
    "AUDIT_FOLDER_NAME",
    "AuditEntry",
    "AuditLog",
    "AuditOutcome",
    "AuditedJob",
    "JobResultKind",
    "JobResults",
    "StateFile",
    "StoreAction",
    "StoreFailure",
    "StoredResults",
    "is_disk_full",
    "result_stamp",
]
