"""Backups: the backup document, its encrypted section, the daily scheduler and the restore preview.

:func:`encode_backup` writes a schema version 2 document from the :class:`BackupContents` the master
composes, with an encrypted section (AES-256-GCM, PBKDF2-SHA256 at 600,000 iterations) when given a
passphrase; :func:`parse_backup` reads versions 1 and 2 and :func:`open_secrets` opens the section,
whole or not at all. :class:`BackupScheduler` writes one backup a day into the backup directory and
one on demand; :func:`parse_backup_file_name` is the only way a file there is named, and
:class:`BackupDownloadTokens` hands out the one-time links a browser downloads one by. :func:`preview_restore`
says what a restore would do; :func:`import_models`, :func:`import_keys` and
:func:`import_host_services` are the restore's import steps, each returning what it changed;
:class:`RestoreJobs` runs them and the downloads and starts after them over a :class:`RestoreHost`.
Fleet recovery (``mirbad up --recover``) opens a backup with :func:`open_fleet_recovery`, which refuses
one that cannot bring a fleet back before anything is written, and imports the nodes with
:func:`import_nodes`.
"""

from ._crypto import MIN_PASSPHRASE_LENGTH, Entropy, check_passphrase
from ._directory import BackupFile, list_backup_files
from ._document import (
    BACKUP_SCHEMA_VERSION,
    KDF_ITERATIONS,
    MAX_KDF_ITERATIONS,
    BackupDocument,
    BackupDocumentV1,
    BackupDocumentV2,
    BackupSecrets,
    CipherParameters,
    EncryptedSecrets,
    FleetCaBackup,
    HostServicesBackup,
    KdfParameters,
    MasterIdentity,
)
from ._download_tokens import DOWNLOAD_TOKEN_TTL, BackupDownloadTokens, DownloadToken
from ._format import Backup, BackupContents, encode_backup, open_secrets, parse_backup
from ._import import (
    HostServicesImport,
    ModelImport,
    backup_host_services,
    backup_models,
    import_host_services,
    import_keys,
    import_models,
)
from ._names import (
    BACKUP_NAME_PREFIX,
    BackupName,
    backup_file_name,
    backup_host_label,
    parse_backup_file_name,
)
from ._preview import preview_restore
from ._recovery import FleetRecovery, NodeImport, import_nodes, open_fleet_recovery
from ._restore_host import FolderPlan, RestoreHost, checked_folders, download_request, folder_plan
from ._restore_job import RestoreJobs, RestoreTimings
from ._scheduler import (
    BACKUP_INTERVAL,
    DEFAULT_BACKUP_KEEP,
    BackupFailure,
    BackupRecord,
    BackupScheduler,
    BackupSettings,
    BackupState,
    BuildBackup,
    Clock,
    DestinationCheck,
)

__all__ = [
    "BACKUP_INTERVAL",
    "BACKUP_NAME_PREFIX",
    "BACKUP_SCHEMA_VERSION",
    "DEFAULT_BACKUP_KEEP",
    "DOWNLOAD_TOKEN_TTL",
    "KDF_ITERATIONS",
    "MAX_KDF_ITERATIONS",
    "MIN_PASSPHRASE_LENGTH",
    "Backup",
    "BackupContents",
    "BackupDocument",
    "BackupDocumentV1",
    "BackupDocumentV2",
    "BackupDownloadTokens",
    "BackupFailure",
    "BackupFile",
    "BackupName",
    "BackupRecord",
    "BackupScheduler",
    "BackupSecrets",
    "BackupSettings",
    "BackupState",
    "BuildBackup",
    "CipherParameters",
    "Clock",
    "DestinationCheck",
    "DownloadToken",
    "EncryptedSecrets",
    "Entropy",
    "FleetCaBackup",
    "FleetRecovery",
    "FolderPlan",
    "HostServicesBackup",
    "HostServicesImport",
    "KdfParameters",
    "MasterIdentity",
    "ModelImport",
    "NodeImport",
    "RestoreHost",
    "RestoreJobs",
    "RestoreTimings",
    "backup_file_name",
    "backup_host_label",
    "backup_host_services",
    "backup_models",
    "check_passphrase",
    "checked_folders",
    "download_request",
    "encode_backup",
    "folder_plan",
    "import_host_services",
    "import_keys",
    "import_models",
    "import_nodes",
    "list_backup_files",
    "open_fleet_recovery",
    "open_secrets",
    "parse_backup",
    "parse_backup_file_name",
    "preview_restore",
]
