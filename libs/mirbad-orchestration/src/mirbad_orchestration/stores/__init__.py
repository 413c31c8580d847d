"""Stores: the master's small files in the data directory, and the audit trail.

:class:`StateFile` is one value (a pydantic document, or any value with its own decode and encode)
behind one lock, replaced atomically on every change; the model and node registries, the recovery
state and the restart pauses are built on it. :class:`AuditLog`
appends who did what to the daily audit files (rotated by size) and reads them back a page at a time,
newest first, filtered by :class:`AuditQuery`. :class:`JobResults` keeps the results of one job kind
(benchmarks, tuning runs), one file per finished job.
"""

from mirbad_protocol.admin import AuditEntry, AuditOutcome

from ._audit import AUDIT_FOLDER_NAME, DEFAULT_AUDIT_FILE_BYTES, AuditedJob, AuditLog
from ._audit_query import DEFAULT_AUDIT_PAGE, MAX_AUDIT_PAGE, AuditPage, AuditQuery, parse_audit_time
from ._job_results import JobResultKind, JobResults, StoredResults, result_stamp
from ._state_file import StateFile, StoreAction, StoreFailure, is_disk_full

__all__ = [
    "AUDIT_FOLDER_NAME",
    "DEFAULT_AUDIT_FILE_BYTES",
    "DEFAULT_AUDIT_PAGE",
    "MAX_AUDIT_PAGE",
    "AuditEntry",
    "AuditLog",
    "AuditOutcome",
    "AuditPage",
    "AuditQuery",
    "AuditedJob",
    "JobResultKind",
    "JobResults",
    "StateFile",
    "StoreAction",
    "StoreFailure",
    "StoredResults",
    "is_disk_full",
    "parse_audit_time",
    "result_stamp",
]
