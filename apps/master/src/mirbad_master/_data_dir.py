"""The data directory's permissions and the hand-over of the first run's administrator password.

The data directory holds the CA key, the password hash and the API keys' hashes: it is the owner's
alone (0700), also when it existed before the first run with looser permissions. The first-run password
is printed only to a terminal; when stdout is a pipe or a file (a service manager's journal, ``nohup``,
a container log) it goes to an owner-only file instead, so it never lands in a log that others read.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Final

__all__ = ["DATA_DIR_MODE", "INITIAL_PASSWORD_FILE", "prepare_data_dir", "write_initial_password"]

DATA_DIR_MODE: Final = 0o700
"""The data directory's permissions."""
INITIAL_PASSWORD_FILE: Final = "initial-admin-password"  # noqa: S105 (a file name)
"""The file inside the data directory that receives the first-run password when stdout is no terminal."""

_logger = logging.getLogger("mirbad_master")


def prepare_data_dir(path: Path) -> None:
    """Create ``path`` owner-only, or tighten an existing one to 0700 (logging the old mode).

    Raises:
        OSError: it cannot be created or its mode changed.
    """
    path.mkdir(mode=DATA_DIR_MODE, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode != DATA_DIR_MODE:
        path.chmod(DATA_DIR_MODE)
        _logger.warning("the data directory %s had mode %04o; tightened to %04o", path, mode, DATA_DIR_MODE)


def write_initial_password(data_dir: Path, password: str) -> Path:
    """Write the first-run ``password`` to an owner-only file in ``data_dir`` and return its path.

    Raises:
        OSError: the file cannot be written.
    """
    path = data_dir / INITIAL_PASSWORD_FILE
    path.unlink(missing_ok=True)  # a stale file may have looser permissions; O_EXCL below makes a new one
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(password + "\n")
    _logger.warning("the first-run administrator password is in %s (stdout is not a terminal)", path)
    return path
