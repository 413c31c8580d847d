"""What ``GET /api/backup/destination`` answers: hostd's view of the share and the master's memory of it."""

from __future__ import annotations

from mirbad_protocol import WireModel
from mirbad_protocol.hostd import BackupMountStatus, BackupShareSettings

__all__ = ["DestinationStatus"]


class DestinationStatus(WireModel):
    """The backup destination as the portal and scripts see it; never the password.

    Attributes:
        node_id: the node whose hostd mounts the share (the master's own machine).
        available: whether that node's hostd answered with the share's status.
        reason: why it did not (no such node, an agent without the feature, hostd away).
        mount: hostd's status: the configured share, whether it is mounted, its type and free space.
        remembered: the share the master last applied (what passphrase backups carry), or None.
        password_kept: whether the share's password is kept sealed for passphrase backups.
    """

    node_id: str
    available: bool = False
    reason: str | None = None
    mount: BackupMountStatus | None = None
    remembered: BackupShareSettings | None = None
    password_kept: bool = False
