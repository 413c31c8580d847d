"""Every change of the restore room, whoever asks (the API, later the Backup & restore page).

A preview changes nothing and is not audited. Starting a restore is audited (refused starts too: a
second restore while one runs, a wrong passphrase, a file that is not a backup, with the reason),
and so is a cancel; the job's own downloads and starts are audited by the paths they take.
"""

from __future__ import annotations

from mirbad_master._composition import MasterServices
from mirbad_orchestration.backups import Backup, open_secrets, parse_backup
from mirbad_protocol import MirbadError
from mirbad_protocol.admin import ApiKeyRecord
from mirbad_protocol.restore import RestoreJobView, RestorePreview

from ._preview import gather_preview
from ._upload import BackupUpload

__all__ = ["cancel_restore", "preview_backup", "restore_backup", "restore_job"]


async def preview_backup(services: MasterServices, upload: BackupUpload) -> RestorePreview:
    """What restoring ``upload`` would do; nothing changes.

    Raises:
        BackupFormatError: the bytes are not a backup this master reads (the field named).
        BackupNotEncryptedError: a passphrase came with a backup that has no encrypted section.
        BackupPassphraseError: the passphrase is wrong, or the backup was altered.
    """
    backup = parse_backup(upload.raw)
    keys = _opened_keys(backup, upload.passphrase)
    # A dry run: the same merge a restore runs, nothing written.
    key_import = await services.keys.import_records(keys, dry_run=True) if keys is not None else None
    return await gather_preview(services, backup, keys, key_import)


async def restore_backup(services: MasterServices, upload: BackupUpload, actor: str) -> RestoreJobView:
    """Start the restore job for ``upload`` (its keys too when its passphrase came with it).

    Raises:
        BackupFormatError: the bytes are not a backup this master reads (the field named).
        BackupNotEncryptedError: a passphrase came with a backup that has no encrypted section.
        BackupPassphraseError: the passphrase is wrong, or the backup was altered.
        RestoreRunningError: a restore runs already.
    """
    try:
        backup = parse_backup(upload.raw)
        keys = _opened_keys(backup, upload.passphrase)
        job = services.restore.start(
            backup.document, keys, actor=actor, bootstrap_node_id=services.settings.default_node
        )
    except MirbadError as exc:
        await services.audit.record(actor, "restore.start", "restore", outcome="refused", detail=str(exc))
        raise
    document = backup.document
    detail = (
        f"schema version {document.schema_version} backup of {document.host or 'an unnamed host'} "
        f"written {document.created_at.isoformat()}: {len(document.models)} models, "
        f"API keys {'included' if keys is not None else 'not read'}"
    )
    await services.audit.record(actor, "restore.start", job.id, detail=detail)
    return job


def restore_job(services: MasterServices) -> RestoreJobView:
    """The running restore job, or the last one, with its progress.

    Raises:
        NoRestoreJobError: no restore has run since the master started.
    """
    return services.restore.view()


async def cancel_restore(services: MasterServices, actor: str) -> RestoreJobView:
    """Cancel the running restore (the download in flight is stopped on its node) and audit it.

    Raises:
        NoRestoreJobError: no restore runs.
    """
    job = await services.restore.cancel()
    await services.audit.record(actor, "restore.cancel", job.id)
    return job


def _opened_keys(backup: Backup, passphrase: str | None) -> list[ApiKeyRecord] | None:
    if passphrase is None:
        return None
    return list(open_secrets(backup, passphrase).api_keys)
