"""Disk space for downloads: what running jobs still need is reserved, and a margin is always kept.

Free space alone is not enough to admit a job: two jobs that each fit can fill the disk together. So
a start must fit in what is free less every unfinished job's remaining bytes on the same file system
less a margin (the data directory, the registry and the job records live on that disk too), and a
running transfer re-checks the same sum as it writes: once the disk cannot hold what is committed plus
the margin (something outside Mirbad wrote to it), the job that notices stops with "insufficient space"
before the disk is full, and its reservation goes back to the others.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from mirbad_runtime.exceptions import InsufficientSpaceError

__all__ = ["DEFAULT_SPACE_MARGIN_BYTES", "FreeSpaceProbe", "SpaceGuard", "disk_free_bytes", "file_system_of"]

DEFAULT_SPACE_MARGIN_BYTES: Final = 1 << 30
"""The free space downloads leave untouched on a model root's file system (1 GiB)."""
CHECK_EVERY_BYTES: Final = 8 << 20
"""How often a running transfer re-checks the free space (every 8 MiB written)."""

FreeSpaceProbe = Callable[[Path], int]
"""The free bytes of the file system holding a folder (blocking; a seam for tests)."""


def disk_free_bytes(path: Path) -> int:
    """The free bytes of the file system that holds ``path`` (:func:`shutil.disk_usage`)."""
    return shutil.disk_usage(path).free


def file_system_of(path: Path) -> int:
    """The device id of ``path``'s file system (roots on one disk share their free space)."""
    try:
        return os.stat(path).st_dev
    except OSError:
        return -1


@dataclass(frozen=True)
class SpaceGuard:
    """Admits and polices downloads against ``probe``'s free space, keeping ``margin_bytes`` free."""

    probe: FreeSpaceProbe = disk_free_bytes
    margin_bytes: int = DEFAULT_SPACE_MARGIN_BYTES

    def check(self, root: Path, needed_bytes: int, reserved_bytes: Iterable[int], *, label: str = "") -> None:
        """Refuse unless ``needed_bytes`` fit beside the other jobs' ``reserved_bytes`` and the margin.

        Blocking (it asks the probe): run it in a thread, or between chunks where a statvfs is cheap.
        ``label`` names the root in the refusal (``model root 0``) instead of its path on the node.

        Raises:
            InsufficientSpaceError: the root's file system cannot hold them all and keep the margin.
        """
        free = self.probe(root)
        usable = free - sum(reserved_bytes) - self.margin_bytes
        if needed_bytes > usable:
            raise InsufficientSpaceError(label or root, needed_bytes, max(0, usable))
