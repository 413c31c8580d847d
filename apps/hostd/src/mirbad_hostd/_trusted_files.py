"""The check every file hostd trusts passes before it is read: root-owned, not group/other-writable.

A file another account can write would let that account widen what hostd does as root (shrink the
deny list's reach by editing the whitelist, add units to it), so hostd refuses to start instead.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from .exceptions import HostdStartupError, InsecureHostdFileError

__all__ = ["check_trusted", "read_trusted_json"]


def check_trusted(path: Path, *, require_root_owner: bool, private: bool = False) -> os.stat_result:
    """Check ``path``'s owner and mode without following a symlink.

    Args:
        path: the file or folder.
        require_root_owner: refuse an owner other than root.
        private: refuse any group/other permission at all (the whitelist), not only write.

    Raises:
        InsecureHostdFileError: a symlink, a foreign owner, or a mode that is too open.
    """
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        raise InsecureHostdFileError(path, "is a symbolic link")
    if require_root_owner and info.st_uid != 0:
        raise InsecureHostdFileError(path, f"is owned by uid {info.st_uid}, not root")
    mode = stat.S_IMODE(info.st_mode)
    if mode & (0o077 if private else 0o022):
        raise InsecureHostdFileError(path, f"has mode {mode:04o}")
    return info


def read_trusted_json(path: Path, *, require_root_owner: bool, private: bool = False) -> object | None:
    """Read a trusted JSON file, or None when it does not exist.

    Raises:
        InsecureHostdFileError: see :func:`check_trusted`.
        HostdStartupError: unreadable or not JSON.
    """
    try:
        check_trusted(path, require_root_owner=require_root_owner, private=private)
    except FileNotFoundError:
        return None
    try:
        document: object = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise HostdStartupError(f"{path}: malformed: {exc}") from None
    return document
