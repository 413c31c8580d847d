"""The backup share's files, rendered from a validated share: pure functions, no I/O.

The mount unit's first line is hostd's marker: a unit at the target without it was written by someone
else and hostd refuses to replace it. The cifs password lives in a credentials file (root, 0600) that
the unit's options point to, never in the unit, which any account can read.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Final

from mirbad_protocol.hostd import BackupShare, BackupShareSettings

__all__ = [
    "MANAGED_MARKER",
    "mount_options",
    "mount_source",
    "mount_unit_name",
    "render_credentials",
    "render_mount_unit",
]

MANAGED_MARKER: Final = "# Managed by mirbad-hostd (the backup share); hostd replaces or removes this file."
"""The first line of every mount unit hostd writes."""

_UNIT_SAFE: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")
_MOUNT_TIMEOUT_S: Final = 30


def mount_unit_name(target: PurePosixPath) -> str:
    """The ``.mount`` unit systemd requires for ``target`` (``systemd-escape --path --suffix=mount``).

    Raises:
        ValueError: ``target`` is not absolute or is the root folder.
    """
    if not target.is_absolute() or str(target) == "/":
        raise ValueError(f"{target}: a mount target must be an absolute folder below /")
    parts = [part for part in str(target).split("/") if part]
    escaped = []
    for part in parts:
        chars = [ch if ch in _UNIT_SAFE else "".join(f"\\x{b:02x}" for b in ch.encode()) for ch in part]
        if part.startswith("."):
            chars[0] = "\\x2e"
        escaped.append("".join(chars))
    return "-".join(escaped) + ".mount"


def mount_source(share: BackupShareSettings) -> str:
    """What mount mounts: ``//server/share`` for cifs, ``server:/export`` for nfs."""
    if share.kind == "cifs":
        return f"//{share.server}/{share.share}"
    return f"{share.server}:{share.share}"


def mount_options(
    share: BackupShareSettings, *, credentials: PurePosixPath | None, uid: int, gid: int
) -> str:
    """Mount's ``-o`` (and the unit's ``Options=``) for ``share``.

    cifs presents every file as ``uid:gid`` with group-writable modes, so the backup account can write
    whatever account the server maps the login to; nfs keeps the server's owners (the export has to
    let ``uid:gid`` write). Nothing a share may execute or elevate is honoured.

    Args:
        share: the validated share.
        credentials: the cifs credentials file (required for cifs, ignored for nfs).
        uid: the backup account.
        gid: its group.
    """
    options = ["rw", "nosuid", "nodev", "noexec"]
    if share.kind == "cifs":
        if credentials is None:
            raise ValueError("a cifs share needs its credentials file")
        options += [
            f"credentials={credentials}",
            f"uid={uid}",
            f"gid={gid}",
            "file_mode=0660",
            "dir_mode=0770",
        ]
        if share.version is not None:
            options.append(f"vers={share.version}")
    else:
        options.append("hard")
        if share.version is not None:
            options.append(f"nfsvers={share.version}")
    return ",".join(options)


def render_mount_unit(
    share: BackupShareSettings,
    *,
    target: PurePosixPath,
    credentials: PurePosixPath | None,
    uid: int,
    gid: int,
) -> str:
    """The mount unit at ``target`` for ``share``: the marker first, enabled from ``remote-fs.target``."""
    options = mount_options(share, credentials=credentials, uid=uid, gid=gid)
    return "\n".join(
        [
            MANAGED_MARKER,
            "[Unit]",
            "Description=Mirbad backup share",
            "Documentation=https://github.com/mirbad/mirbad/blob/main/docs/hostd.md",
            "Wants=network-online.target",
            "After=network-online.target",
            "",
            "[Mount]",
            f"What={mount_source(share)}",
            f"Where={target}",
            f"Type={share.kind}",
            f"Options=_netdev,{options}",
            f"TimeoutSec={_MOUNT_TIMEOUT_S}",
            "",
            "[Install]",
            "WantedBy=remote-fs.target",
            "",
        ]
    )


def render_credentials(share: BackupShare) -> str:
    """The cifs credentials file: ``username=``, ``password=`` and ``domain=`` lines (mount.cifs(8)).

    Raises:
        ValueError: ``share`` is not a cifs share with its account.
    """
    if share.kind != "cifs" or share.username is None or share.password is None:
        raise ValueError("only a cifs share with its account has a credentials file")
    lines = [f"username={share.username}", f"password={share.password}"]
    if share.domain is not None:
        lines.append(f"domain={share.domain}")
    return "".join(f"{line}\n" for line in lines)
