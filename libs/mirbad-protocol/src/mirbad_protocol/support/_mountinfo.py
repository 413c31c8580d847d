r"""``/proc/self/mountinfo``: which file system is mounted where, as the reading process's namespace sees it.

hostd reads it for the backup share's target (its namespace is a slave of the host's, so a share the
host mounts later shows up there too); the master reads its own to tell whether its backup folder is
on a network file system. The format is proc(5)'s: ``id parent major:minor root mount-point
options [optional fields...] - fstype source super-options``, where a space, tab, newline or
backslash inside a path is written as an octal escape (``\040``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "NETWORK_FS_TYPES",
    "MountEntry",
    "escape_mountinfo",
    "mount_at",
    "mount_holding",
    "parse_mountinfo",
]

NETWORK_FS_TYPES: Final = frozenset({"cifs", "smb3", "nfs", "nfs4"})
"""The file system types a backup share can be mounted as."""

_ESCAPE: Final = re.compile(r"\\([0-7]{3})")
_ESCAPED: Final = {" ": "\\040", "\t": "\\011", "\n": "\\012", "\\": "\\134"}


@dataclass(frozen=True)
class MountEntry:
    """One line of mountinfo.

    Attributes:
        mount_id: the mount's id.
        parent_id: its parent's id.
        root: the folder of the file system mounted there.
        mount_point: where it is mounted (unescaped).
        fs_type: the file system type (``cifs``, ``nfs4``, ``ext4``).
        source: the mount source (``//nas/backups``), unescaped.
    """

    mount_id: int
    parent_id: int
    root: str
    mount_point: str
    fs_type: str
    source: str


def _unescape(text: str) -> str:
    return _ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), text)


def escape_mountinfo(text: str) -> str:
    """Write ``text`` the way the kernel writes a path in mountinfo (the inverse of parsing)."""
    return "".join(_ESCAPED.get(ch, ch) for ch in text)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Every well-formed line of ``text``, in order; a line that is not mountinfo's shape is skipped."""
    entries: list[MountEntry] = []
    # Only "\n" ends a line: the kernel escapes it in a path but not "\r" or other line breaks.
    for line in text.split("\n"):
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        separator = fields.index("-", 6)
        if len(fields) < separator + 3 or len(fields) < 6:
            continue
        try:
            mount_id, parent_id = int(fields[0]), int(fields[1])
        except ValueError:
            continue
        entries.append(
            MountEntry(
                mount_id=mount_id,
                parent_id=parent_id,
                root=_unescape(fields[3]),
                mount_point=_unescape(fields[4]),
                fs_type=fields[separator + 1],
                source=_unescape(fields[separator + 2]),
            )
        )
    return entries


def mount_at(entries: list[MountEntry], mount_point: str) -> MountEntry | None:
    """What is visible at ``mount_point``: the last mount there (a later mount hides an earlier one)."""
    found = None
    for entry in entries:
        if entry.mount_point == mount_point:
            found = entry
    return found


def mount_holding(entries: list[MountEntry], path: str) -> MountEntry | None:
    """The mount a file at the absolute ``path`` lands on: the visible one with the deepest mount point.

    ``path`` is taken as written (the caller resolves symbolic links first); ``/srv/backups2`` is not
    below ``/srv/backups``.
    """
    found: MountEntry | None = None
    for entry in entries:
        point = entry.mount_point.rstrip("/")
        inside = path == entry.mount_point or path.startswith(point + "/")
        # ">=": of two mounts at one point the later one is visible.
        if inside and (found is None or len(entry.mount_point) >= len(found.mount_point)):
            found = entry
    return found
