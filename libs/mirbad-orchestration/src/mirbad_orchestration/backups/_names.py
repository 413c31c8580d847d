"""Backup file names: ``mirbad-backup-<host>-<stamp>.json``, and the check that serves nothing else.

The stamp is the UTC time to the second (``20261206T051730Z``), so names sort by time. The host part
is the master's host name folded to lowercase letters, digits and inner hyphens (one DNS label), so a
name is always a bare file name: the checker accepts only that shape, which cannot hold a separator, a
dot-dot or any other path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

__all__ = [
    "BACKUP_NAME_PREFIX",
    "BackupName",
    "backup_file_name",
    "backup_host_label",
    "parse_backup_file_name",
]

BACKUP_NAME_PREFIX: Final = "mirbad-backup-"
"""How every backup file's name starts."""

_STAMP_FORMAT: Final = "%Y%m%dT%H%M%SZ"
_NAME: Final = re.compile(
    r"mirbad-backup-(?P<host>[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)-(?P<stamp>[0-9]{8}T[0-9]{6}Z)\.json"
)
_NOT_LABEL: Final = re.compile(r"[^a-z0-9]+")
_FALLBACK_HOST: Final = "master"


@dataclass(frozen=True, order=True)
class BackupName:
    """A parsed backup file name (ordered by time, then host).

    Attributes:
        created_at: the stamp, in UTC.
        host: the host label.
        name: the file name itself.
    """

    created_at: datetime
    host: str
    name: str


def backup_host_label(host: str) -> str:
    """Fold a host name into the label a backup file name carries (``Lab-GPU.local`` → ``lab-gpu-local``)."""
    label = _NOT_LABEL.sub("-", host.lower()).strip("-")[:63].rstrip("-")
    return label or _FALLBACK_HOST


def backup_file_name(host: str, created_at: datetime) -> str:
    """The file name of a backup of ``host`` written at ``created_at`` (timezone-aware)."""
    stamp = created_at.astimezone(UTC).strftime(_STAMP_FORMAT)
    return f"{BACKUP_NAME_PREFIX}{backup_host_label(host)}-{stamp}.json"


def parse_backup_file_name(name: str) -> BackupName | None:
    """Read a backup file name; None for anything that is not exactly one (a path, another file)."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    try:
        created_at = datetime.strptime(match["stamp"], _STAMP_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None  # the shape of a stamp, not a time (month 13)
    return BackupName(created_at, match["host"], name)
