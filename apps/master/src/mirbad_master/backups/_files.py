"""Reading the backup directory: one backup by its bare name, and whether a backup is encrypted.

A name is taken only when :func:`parse_backup_file_name` accepts it, which rules out any separator or
``..``; the file is opened without following a symlink (``O_NOFOLLOW``) and must be a regular file
(a FIFO is never waited on: ``O_NONBLOCK``), so nothing outside the directory is ever read through it.
These functions block; the actions run them in a worker thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path
from typing import Final

from mirbad_orchestration.backups import parse_backup_file_name

__all__ = ["is_encrypted", "read_backup"]

_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_MAX_PEEK_BYTES: Final = 64 * 1024 * 1024  # the largest backup a restore takes


def read_backup(directory: Path, name: str) -> bytes | None:
    """The bytes of the backup ``name`` in ``directory``; None when there is no such backup.

    None too for a name that is no backup's, a symlink, anything but a regular file, or a directory
    that cannot be read.
    """
    if parse_backup_file_name(name) is None:
        return None
    try:
        descriptor = os.open(directory / name, _OPEN_FLAGS)
    except OSError:
        return None  # missing, a symlink (ELOOP), unreadable
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            return None
        # Opened non-blocking for the FIFO case; a regular file reads alike either way.
        os.set_blocking(file.fileno(), True)
        return file.read()


def is_encrypted(directory: Path, name: str) -> bool | None:
    """Whether the backup ``name`` carries an encrypted section; None when it cannot be read to tell."""
    data = None
    with contextlib.suppress(OSError):
        if (directory / name).lstat().st_size <= _MAX_PEEK_BYTES:
            data = read_backup(directory, name)
    if data is None:
        return None
    try:
        document = json.loads(data)
    except ValueError:
        return None
    return document.get("secrets") is not None if isinstance(document, dict) else None
