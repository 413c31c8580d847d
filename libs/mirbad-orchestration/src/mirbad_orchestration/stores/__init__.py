"""Stores: the master's small files in the data directory, and the audit trail.

:class:`StateFile` is one pydantic document (or any value with its own codec) behind one lock, replaced
atomically on every change; the registries and the recovery hints are built on it. :class:`AuditLog`
appends who did what to the daily audit files.
"""

from ._audit import AUDIT_FOLDER_NAME, AuditEntry, AuditLog, AuditOutcome
from ._state_file import StateFile, is_disk_full

__all__ = [
    "AUDIT_FOLDER_NAME",
    "AuditEntry",
    "AuditLog",
    "AuditOutcome",
    "StateFile",
    "is_disk_full",
]
