"""Back up now, the listing, download tokens and reading one backup, whoever asks (API, portal).

Each change and its audit line are one call, so ``/api`` and the portal leave the same lines:
``backup.create`` (target the file; ``failed`` with the reason when it could not be written),
``backup.token`` when a download link is issued and ``backup.download`` when a backup is read out
(through ``/api/backup/files/{name}`` or a token, whose line names who asked for the token). A name
that is no backup in the directory is refused alike, 404 ``backup_not_found``, whatever it holds.
"""

from __future__ import annotations

from pathlib import Path

import anyio

from mirbad_master._composition import MasterServices
from mirbad_master.exceptions import ApiError
from mirbad_orchestration.backups import (
    BACKUP_INTERVAL,
    BackupFile,
    BackupRecord,
    list_backup_files,
    parse_backup_file_name,
)
from mirbad_orchestration.exceptions import BackupRunError
from mirbad_protocol.admin import (
    AdminErrorCode,
    BackupDownloadToken,
    BackupFailureView,
    BackupInfo,
    BackupList,
    BackupSchedule,
)

from ._files import is_encrypted, read_backup

__all__ = [
    "back_up_now",
    "backup_list",
    "download_by_token",
    "issue_download_token",
    "read_backup_file",
]


async def backup_list(services: MasterServices) -> BackupList:
    """The backups in the directory (newest first), the schedule, the last backup and the last failure."""
    scheduler = services.backups
    settings = scheduler.settings
    directory = settings.directory
    schedule = BackupSchedule(
        enabled=directory is not None,
        directory=str(directory) if directory is not None else None,
        keep=settings.keep,
        include_ca=settings.include_ca,
        interval_s=int(BACKUP_INTERVAL.total_seconds()),
    )
    backups: list[BackupInfo] = []
    listing_error = None
    if directory is not None:
        try:
            backups = await anyio.to_thread.run_sync(_listed, directory)
        except BackupRunError as exc:
            listing_error = exc.reason
    state = scheduler.state
    failure = state.last_failure
    return BackupList(
        backups=backups,
        schedule=schedule,
        last_backup=_record_info(state.last_backup),
        last_failure=BackupFailureView(at=failure.at, reason=failure.reason, scheduled=failure.scheduled)
        if failure is not None
        else None,
        listing_error=listing_error,
    )


async def back_up_now(services: MasterServices, passphrase: str | None, actor: str) -> BackupInfo:
    """Write a backup now, with the secrets encrypted when given a passphrase; audited.

    Raises:
        BackupPassphraseTooShortError: the passphrase is under 12 characters (nothing tried or audited).
        BackupRunError: it could not be written (recorded as the last failure, audited ``failed``).
    """
    try:
        written = await services.backups.back_up_now(passphrase)
    except BackupRunError as exc:
        await services.audit.record(actor, "backup.create", "-", outcome="failed", detail=exc.reason)
        raise
    await services.audit.record(
        actor, "backup.create", written.name, detail="encrypted" if passphrase is not None else "plain"
    )
    return BackupInfo(
        name=written.name,
        host=written.host,
        created_at=written.created_at,
        size_bytes=written.size_bytes,
        encrypted=passphrase is not None,
    )


async def issue_download_token(services: MasterServices, name: str, actor: str) -> BackupDownloadToken:
    """A one-time, two-minute token to download the backup ``name`` without a bearer header; audited.

    Raises:
        ApiError: 404 ``backup_not_found``: no such backup in the directory.
    """
    await _read(services, name)  # only a backup that is there gets a token
    issued = services.backup_downloads.issue(name, actor)
    await services.audit.record(actor, "backup.token", name)
    return BackupDownloadToken(token=issued.token, expires_at=issued.expires_at)


async def download_by_token(services: MasterServices, token: str) -> tuple[str, bytes]:
    """The backup a token was issued for, once (its name and bytes); audited for the token's issuer.

    Raises:
        ApiError: 404 ``backup_not_found``: the token is unknown, used or expired, or the backup is gone.
    """
    issued = services.backup_downloads.take(token)
    if issued is None:
        raise ApiError(404, AdminErrorCode.BACKUP_NOT_FOUND, "this download link is unknown, used or expired")
    return issued.name, await read_backup_file(services, issued.name, issued.issued_to)


async def read_backup_file(services: MasterServices, name: str, actor: str) -> bytes:
    """The bytes of the backup ``name`` (a bare backup file name in the directory); audited.

    Raises:
        ApiError: 404 ``backup_not_found``: no such backup (or a name that is no backup's).
    """
    data = await _read(services, name)
    await services.audit.record(actor, "backup.download", name)
    return data


async def _read(services: MasterServices, name: str) -> bytes:
    directory = services.backups.settings.directory
    data = None
    if directory is not None and parse_backup_file_name(name) is not None:
        data = await anyio.to_thread.run_sync(read_backup, directory, name)
    if data is None:
        # The name is not echoed: it is whatever the caller sent, a path included.
        raise ApiError(404, AdminErrorCode.BACKUP_NOT_FOUND, "no such backup in the backup directory")
    return data


def _listed(directory: Path) -> list[BackupInfo]:
    return [_info(directory, file) for file in list_backup_files(directory)]


def _info(directory: Path, file: BackupFile) -> BackupInfo:
    return BackupInfo(
        name=file.name,
        host=file.host,
        created_at=file.created_at,
        size_bytes=file.size_bytes,
        encrypted=is_encrypted(directory, file.name),
    )


def _record_info(record: BackupRecord | None) -> BackupInfo | None:
    if record is None:
        return None
    parsed = parse_backup_file_name(record.name)
    return BackupInfo(
        name=record.name,
        host=parsed.host if parsed is not None else "",
        created_at=record.created_at,
        size_bytes=record.size_bytes,
        encrypted=record.encrypted,
    )
