"""mirbad_protocol.restore: a backup's restore preview and the restore job, as the admin API carries them."""

from ._restore import (
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
    "ModelChange",
    "ModelPreview",
    "RestoreJobView",
    "RestoreKeyPreview",
    "RestoreModelProgress",
    "RestoreModelStep",
    "RestorePhase",
    "RestorePreview",
]
