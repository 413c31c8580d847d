"""mirbad_protocol.admin: the master's admin API (``/api``): refusals, views and API keys.

The refusal codes and their envelope, the views the master answers with (the backups' and the audit
log's among them),
and API keys (the create body, the key as listed and as stored, per-key usage). The master builds
these; :mod:`mirbad_client` and the portal read them.
"""

from ._admin_errors import AdminError, AdminErrorBody, AdminErrorCode, admin_error_body
from ._admin_views import (
    EnrollmentTokenIssued,
    MaintenanceView,
    ModelView,
    NodeSummary,
    RestartPause,
    SettingChangeView,
    StatusReport,
)
from ._api_keys import (
    API_KEY_ID_PATTERN,
    API_KEY_NAME_MAX_LENGTH,
    API_KEY_SECRET_PREFIX,
    MAX_ALLOWED_MODELS,
    MAX_KEY_RATE_LIMIT,
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyInfo,
    ApiKeyRecord,
    ApiKeyState,
    KeyUsage,
)
from ._audit_views import AuditEntry, AuditList, AuditOutcome
from ._backup_views import (
    BACKUP_DOWNLOAD_TOKEN_TTL_S,
    MAX_BACKUP_PASSPHRASE_LENGTH,
    BackupDownloadRequest,
    BackupDownloadToken,
    BackupFailureView,
    BackupInfo,
    BackupList,
    BackupNow,
    BackupSchedule,
)

__all__ = [
    "API_KEY_ID_PATTERN",
    "API_KEY_NAME_MAX_LENGTH",
    "API_KEY_SECRET_PREFIX",
    "BACKUP_DOWNLOAD_TOKEN_TTL_S",
    "MAX_ALLOWED_MODELS",
    "MAX_BACKUP_PASSPHRASE_LENGTH",
    "MAX_KEY_RATE_LIMIT",
    "AdminError",
    "AdminErrorBody",
    "AdminErrorCode",
    "ApiKeyCreate",
    "ApiKeyCreated",
    "ApiKeyInfo",
    "ApiKeyRecord",
    "ApiKeyState",
    "AuditEntry",
    "AuditList",
    "AuditOutcome",
    "BackupDownloadRequest",
    "BackupDownloadToken",
    "BackupFailureView",
    "BackupInfo",
    "BackupList",
    "BackupNow",
    "BackupSchedule",
    "EnrollmentTokenIssued",
    "KeyUsage",
    "MaintenanceView",
    "ModelView",
    "NodeSummary",
    "RestartPause",
    "SettingChangeView",
    "StatusReport",
    "admin_error_body",
]
