"""Restoring a backup, as the admin API carries it: the preview and the restore job with its progress.

The preview says what a restore would do without changing anything; the job runs it (one at a time,
fleet-wide) and reports, per model of the backup, where it stands: its folders checked, downloaded
through its node, started. A restore job's state is :class:`mirbad_protocol.benchmarks.JobState`, the
one every job kind shares.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal

from pydantic import AwareDatetime, Field

from ._benchmarks import JobState
from ._wire import WireModel

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

BACKUP_PASSPHRASE_HEADER: Final = "X-Mirbad-Backup-Passphrase"  # noqa: S105 - a header name, not a secret
"""The header that may carry a backup's passphrase to the restore routes (or a multipart field)."""
MAX_BACKUP_BYTES: Final = 64 * 1024 * 1024
"""The largest backup the restore routes read (64 MiB); a larger upload is refused with 422."""

ModelChange = Literal["new", "changed", "identical"]
"""How a backup's model compares with the registry's model of the same id."""


class ModelPreview(WireModel):
    """One model of the backup.

    Attributes:
        id: the model's id.
        served_name: its served name in the backup.
        change: new here, changed (``changed_fields`` lists how), or identical.
        changed_fields: the wire names of the top-level fields that differ, in definition order.
        folders_present: whether all its folders are on its node; None when the node did not say.
        download_bytes: what is left to download for it; None when nothing is to be downloaded or
            the size is unknown.
        needs_manual_steps: its folders are not known to be there and it has no source to download
            them from: someone has to put them on the node.
    """

    id: str
    served_name: str
    change: ModelChange
    changed_fields: list[str] = Field(default_factory=list)
    folders_present: bool | None = None
    download_bytes: int | None = None
    needs_manual_steps: bool = False


class RestoreKeyPreview(WireModel):
    """An API key a restore would add (never its hash).

    Attributes:
        id: the key's id.
        name: what it is for.
        prefix: the first characters of its secret.
    """

    id: str
    name: str
    prefix: str


class RestorePreview(WireModel):
    """What restoring a backup would do.

    Attributes:
        schema_version: the backup's schema version (1: its models go to the bootstrap node).
        created_at: when the backup was written.
        host: the host that wrote it, when recorded.
        models: the backup's models, in its order.
        api_keys_included: whether the backup's keys were read (an encrypted backup, opened).
        new_api_keys: the keys a restore would add.
        conflicting_api_keys: ids of backup keys whose id or hash belongs to another key here (skipped).
        notes: what the preview could not find out, in words (a node that did not answer, download
            sizes no node could tell).
    """

    schema_version: int
    created_at: AwareDatetime
    host: str | None = None
    models: list[ModelPreview] = Field(default_factory=list)
    api_keys_included: bool = False
    new_api_keys: list[RestoreKeyPreview] = Field(default_factory=list)
    conflicting_api_keys: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def manual_models(self) -> list[str]:
        """Ids of the models that need manual steps."""
        return [model.id for model in self.models if model.needs_manual_steps]

    @property
    def download_bytes(self) -> int:
        """What a restore would download in all (the known sizes)."""
        return sum(model.download_bytes or 0 for model in self.models)


RestorePhase = Literal["models", "keys", "host-services", "downloads", "starts", "done"]
"""What a restore job is doing: importing the models, the keys, the host services, then downloading
the missing folders and starting the models that start by themselves."""

RestoreModelStep = Literal[
    "pending",
    "downloading",
    "present",
    "starting",
    "started",
    "left-stopped",
    "manual",
    "failed",
    "cancelled",
]
"""Where one model of a restore stands: waiting; a folder downloading; all folders present (and not
to be started); starting; started; left stopped (its node refused it for memory); needing someone to
put its folders on its node (no source); failed (a download or start failed: ``message``); cancelled."""


class RestoreModelProgress(WireModel):
    """One model of a restore job.

    Attributes:
        model_id: the model.
        node_id: the node its folders are checked on, downloaded to and started on.
        step: where it stands.
        missing_folders: the folders its node did not have when the job looked.
        folder: the folder downloading now.
        download_id: that download's job on the node.
        done_bytes: how much of that folder is on disk.
        total_bytes: that folder's size (0 until the node knows it).
        message: why it failed, was left stopped or needs manual steps, for people.
    """

    model_id: str
    node_id: str
    step: RestoreModelStep = "pending"
    missing_folders: list[str] = Field(default_factory=list)
    folder: str | None = None
    download_id: str | None = None
    done_bytes: int = 0
    total_bytes: int = 0
    message: str | None = None


class RestoreJobView(WireModel):
    """The restore job and its live progress.

    Attributes:
        id: the job's id.
        state: running, or how it ended.
        phase: what it is doing.
        actor: who started it.
        schema_version: the backup's schema version.
        backup_host: the host that wrote the backup, when recorded.
        models_added: ids of the models the backup added to the registry.
        models_changed: ids of the models whose definition the backup replaced.
        models_unchanged: ids of the models already stored as the backup has them.
        models_refused: per model id, why the registry refused it (the rest was restored).
        keys_added: ids of the API keys the backup added (the old secrets authenticate again).
        keys_conflicting: ids of the backup's keys skipped because another key here has their id or hash.
        host_services_changed: ``node/name`` of the whitelist entries the backup added or replaced.
        models: each model of the backup, in its order, and where it stands.
        eta_s: the seconds it expects to still need (None: unknown).
        started_at: when it started.
        finished_at: when it ended.
        error: why it failed.
    """

    id: str
    state: JobState = "running"
    phase: RestorePhase = "models"
    actor: str = ""
    schema_version: int
    backup_host: str | None = None
    models_added: list[str] = Field(default_factory=list)
    models_changed: list[str] = Field(default_factory=list)
    models_unchanged: list[str] = Field(default_factory=list)
    models_refused: dict[str, str] = Field(default_factory=dict)
    keys_added: list[str] = Field(default_factory=list)
    keys_conflicting: list[str] = Field(default_factory=list)
    host_services_changed: list[str] = Field(default_factory=list)
    models: list[RestoreModelProgress] = Field(default_factory=list)
    eta_s: float | None = None
    started_at: datetime
    finished_at: datetime | None = None
    error: str | None = None
