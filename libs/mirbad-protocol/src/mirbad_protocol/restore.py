"""mirbad_protocol.restore: a backup's restore preview and the restore job, as the admin API carries them."""

from ._restore import (
    BACKUP_PASSPHRASE_HEADER,
    MAX_BACKUP_BYTES,
    ModelChange,
    ModelPreview,
    RestoreJobView,
    RestoreKeyPreview,
    RestoreModelProgress,
    RestoreModelStep,
    RestorePhase,
    RestorePreview,
)

__all__ = [
    "BACKUP_PASSPHRASE_HEADER",
    "MAX_BACKUP_BYTES",
    "ModelChange",
    "ModelPreview",
    "RestoreJobView",
    "RestoreKeyPreview",
    "RestoreModelProgress",
    "RestoreModelStep",
    "RestorePhase",
    "RestorePreview",
]
