"""The admin API's backup views: the backups in the directory, the schedule, back up now, download tokens.

The master answers ``GET /api/backup`` with a :class:`BackupList`; ``POST /api/backup`` takes a
:class:`BackupNow` and answers the :class:`BackupInfo` written; ``POST /api/backup/download-tokens``
takes a :class:`BackupDownloadRequest` and answers a :class:`BackupDownloadToken`, which
``GET /api/backup/download/{token}`` takes once without a bearer header (a browser's download).
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import AwareDatetime, Field

from ._wire import WireModel

__all__ = [
    "BACKUP_DOWNLOAD_TOKEN_TTL_S",
    "MAX_BACKUP_PASSPHRASE_LENGTH",
    "BackupDownloadRequest",
    "BackupDownloadToken",
    "BackupFailureView",
    "BackupInfo",
    "BackupList",
    "BackupNow",
    "BackupSchedule",
]

BACKUP_DOWNLOAD_TOKEN_TTL_S: Final = 120
"""How long a download token is good for (and it is good for one download only)."""
MAX_BACKUP_PASSPHRASE_LENGTH: Final = 1024
"""The longest passphrase taken (PBKDF2 hashes it anyway; a longer one is a mistake or an attack)."""


class BackupInfo(WireModel):
    """One backup in the backup directory.

    Attributes:
        name: its bare file name, ``mirbad-backup-<host>-<stamp>.json``.
        host: the host label in its name (the master that wrote it).
        created_at: the stamp in its name.
        size_bytes: its size.
        encrypted: whether it carries an encrypted section (a passphrase backup); ``None`` when the
            file could not be read to tell.
    """

    name: str
    host: str
    created_at: AwareDatetime
    size_bytes: int
    encrypted: bool | None = None


class BackupSchedule(WireModel):
    """The daily backup's settings.

    Attributes:
        enabled: whether scheduled backups run (a backup directory is set).
        directory: the backup directory, if set.
        keep: how many of this master's backups stay in it.
        include_ca: whether passphrase backups carry the fleet CA.
        interval_s: seconds between scheduled backups (one a day).
    """

    enabled: bool
    directory: str | None = None
    keep: int
    include_ca: bool
    interval_s: int


class BackupFailureView(WireModel):
    """The last backup that failed.

    Attributes:
        at: when it was tried.
        reason: why it failed, for people.
        scheduled: whether the schedule ran it (else someone asked for it).
    """

    at: AwareDatetime
    reason: str
    scheduled: bool


class BackupList(WireModel):
    """What ``GET /api/backup`` answers.

    Attributes:
        backups: the backups in the directory (every host's), newest first.
        schedule: the schedule.
        last_backup: the last backup this master wrote since it started, if any.
        last_failure: the last backup that failed since it started, if any (compare the times with
            ``last_backup`` to tell which is newer).
        listing_error: why the directory could not be listed, when it could not.
    """

    backups: list[BackupInfo] = Field(default_factory=list)
    schedule: BackupSchedule
    last_backup: BackupInfo | None = None
    last_failure: BackupFailureView | None = None
    listing_error: str | None = None


class BackupNow(WireModel):
    """The body of ``POST /api/backup``.

    Attributes:
        passphrase: encrypts the secrets (API keys, the fleet CA, the share password) into the backup;
            at least 12 characters. Without one no secret is written.
    """

    passphrase: Annotated[str, Field(max_length=MAX_BACKUP_PASSPHRASE_LENGTH)] | None = None


class BackupDownloadRequest(WireModel):
    """The body of ``POST /api/backup/download-tokens``.

    Attributes:
        name: the backup's bare file name.
    """

    name: Annotated[str, Field(min_length=1, max_length=255)]


class BackupDownloadToken(WireModel):
    """A one-time download token.

    Attributes:
        token: the token for ``GET /api/backup/download/{token}``.
        expires_at: when it stops working (two minutes after it was issued).
    """

    token: str
    expires_at: AwareDatetime
