"""Whether a scheduled backup may be written: the rule that keeps backups off the wrong disk.

When a share is configured for backups, the backup folder is where hostd mounts it; if that mount is
missing (the server was down at boot, the unit failed, the mount propagation broke), the folder is the
local disk underneath, and a backup written there would fill the master's disk and be lost with it,
while the operator believes it is on the share. So the backup is skipped and the reason reported.
Without a share, the local folder is the destination and is always fine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mirbad_protocol.support import NETWORK_FS_TYPES, mount_holding, parse_mountinfo

__all__ = ["DestinationReadiness", "backup_folder_readiness"]


@dataclass(frozen=True)
class DestinationReadiness:
    """The verdict on the backup folder.

    Attributes:
        ready: whether a backup may be written there now.
        reason: why not (for the scheduler's recorded failure); empty when ready.
        fs_type: the file system the folder is on, when mountinfo said.
    """

    ready: bool
    reason: str = ""
    fs_type: str | None = None


def backup_folder_readiness(
    backup_dir: Path, *, share_configured: bool, mountinfo: Path
) -> DestinationReadiness:
    """The verdict for ``backup_dir`` given whether a share is (or was last known to be) configured.

    Args:
        backup_dir: the folder backups are written to.
        share_configured: a share is configured, or was when the agent last answered.
        mountinfo: the mount table to read (``/proc/self/mountinfo``, or a test's stand-in).
    """
    if not share_configured:
        return DestinationReadiness(ready=True)
    try:
        text = mountinfo.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return DestinationReadiness(ready=False, reason=f"cannot read {mountinfo} to find the share: {exc}")
    # The folder as the kernel names it: a symbolic link on the way is followed, as the writer would.
    where = os.path.realpath(backup_dir)
    entry = mount_holding(parse_mountinfo(text), where)
    fs_type = entry.fs_type if entry is not None else None
    if fs_type in NETWORK_FS_TYPES:
        return DestinationReadiness(ready=True, fs_type=fs_type)
    on = f"on {fs_type} ({entry.source})" if entry is not None else "on no mount mountinfo lists"
    return DestinationReadiness(
        ready=False,
        reason=(
            f"a network share is configured for backups but {backup_dir} is {on}, not on the share: "
            "the backup was skipped rather than written to the local disk"
        ),
        fs_type=fs_type,
    )
