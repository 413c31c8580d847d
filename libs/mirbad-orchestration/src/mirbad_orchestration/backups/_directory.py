"""The backup directory: the backups in it, writing one atomically, pruning to the newest few.

The directory is the operator's (a bind mount, a network share): it is never created here, and only
files whose names :func:`parse_backup_file_name` accepts are ever listed, pruned or served. These
functions block; the scheduler runs them in a worker thread.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mirbad_orchestration.exceptions import BackupRunError
from mirbad_protocol.support import write_bytes_atomic

from ._names import backup_file_name, parse_backup_file_name

__all__ = ["BackupFile", "list_backup_files"]


@dataclass(frozen=True)
class BackupFile:
    """One backup in the directory.

    Attributes:
        name: its bare file name.
        host: the host label in its name.
        created_at: the stamp in its name (UTC).
        size_bytes: its size.
    """

    name: str
    host: str
    created_at: datetime
    size_bytes: int


def list_backup_files(directory: Path, *, host: str | None = None) -> list[BackupFile]:
    """The backups in ``directory``, newest first; only regular files with a backup's name.

    Args:
        directory: the backup directory.
        host: only this host label's backups (the ones a master prunes); all when None.

    Raises:
        BackupRunError: the directory does not exist or cannot be listed.
    """
    try:
        entries = list(directory.iterdir())
    except OSError as exc:
        raise BackupRunError(f"cannot list the backup directory {directory}: {exc.strerror or exc}") from None
    found = []
    for entry in entries:
        parsed = parse_backup_file_name(entry.name)
        if parsed is None or (host is not None and parsed.host != host):
            continue
        try:
            info = entry.lstat()  # a symlink is not a backup: it could lead out of the directory
        except OSError:
            continue  # removed meanwhile
        if stat.S_ISREG(info.st_mode):
            found.append(BackupFile(parsed.name, parsed.host, parsed.created_at, info.st_size))
    return sorted(found, key=lambda file: (file.created_at, file.name), reverse=True)


def free_backup_time(directory: Path, host: str, created_at: datetime) -> datetime:
    """The first second from ``created_at`` on whose backup name is not taken in ``directory``.

    Two backups within one second would otherwise share a name, and the second would replace the first
    (an unencrypted one replacing the passphrase backup just made, say).
    """
    stamp = created_at.astimezone(UTC).replace(microsecond=0)
    while (directory / backup_file_name(host, stamp)).exists():
        stamp += timedelta(seconds=1)
    return stamp


def write_backup_file(directory: Path, name: str, data: bytes) -> BackupFile:
    """Write one backup atomically into an existing directory.

    Raises:
        BackupRunError: the directory is missing (it is never created) or the write failed.
    """
    if not directory.is_dir():
        raise BackupRunError(f"the backup directory {directory} does not exist (it is never created here)")
    parsed = parse_backup_file_name(name)
    if parsed is None:
        raise BackupRunError(f"{name!r} is not a backup file name")
    try:
        write_bytes_atomic(directory / name, data)
    except OSError as exc:
        raise BackupRunError(f"cannot write {directory / name}: {exc.strerror or exc}") from None
    return BackupFile(name, parsed.host, parsed.created_at, len(data))


def prune_backup_files(directory: Path, host: str, keep: int, *, spare: str = "") -> list[str]:
    """Remove ``host``'s backups beyond the ``keep`` newest; return the names removed.

    A file that cannot be removed stays (the next prune tries again).

    Args:
        directory: the backup directory.
        host: the host label whose backups are pruned.
        keep: how many of the newest stay.
        spare: a name never removed: the backup just written, even when the clock was set back and
            older files carry later stamps.

    Raises:
        BackupRunError: the directory cannot be listed.
    """
    removed = []
    for old in list_backup_files(directory, host=host)[keep:]:
        if old.name == spare:
            continue
        try:
            (directory / old.name).unlink()
        except OSError:
            continue
        removed.append(old.name)
    return removed
