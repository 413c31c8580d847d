"""The backup share on hostd: what a request may say about the share, and what hostd answers.

The mount's target is fixed by hostd's settings; a request only describes the share (its kind, server,
share or export, and for cifs the account). Each field has a small character set of its own: every
value ends up in a mount unit's ``What=``/``Options=`` line or in mount's ``-o`` argument, where ``,``
separates options, ``=`` splits a key from its value, ``%`` is a systemd specifier and quotes or a
newline would end the line, so none of them can pass, and ``..`` cannot climb out of a share's path.
The password never reaches an option: it goes to the cifs credentials file (one ``key=value`` per
line), so any printable character is allowed there, and it is never returned, logged or shown by
``repr``.
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from ._wire import WireModel
from .exceptions import InvalidFieldError

__all__ = [
    "BACKUP_SHARE_KINDS",
    "BackupMountRemoved",
    "BackupMountStatus",
    "BackupShare",
    "BackupShareKind",
    "BackupShareProbe",
    "BackupShareSettings",
    "check_share_domain",
    "check_share_password",
    "check_share_path",
    "check_share_server",
    "check_share_user",
    "check_share_version",
]

BackupShareKind = Literal["cifs", "nfs"]
"""The network file systems a backup share can be: SMB (``cifs``) or NFS."""

BACKUP_SHARE_KINDS: Final[tuple[BackupShareKind, ...]] = ("cifs", "nfs")

_MAX_PASSWORD: Final = 256
_SERVER: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?", re.ASCII)
_PATH: Final = re.compile(r"/?[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*", re.ASCII)
_USER: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}", re.ASCII)
_DOMAIN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", re.ASCII)
_VERSIONS: Final[dict[str, tuple[str, ...]]] = {
    "cifs": ("1.0", "2.0", "2.1", "3", "3.0", "3.02", "3.1.1"),
    "nfs": ("3", "4", "4.0", "4.1", "4.2"),
}


def _no_climbing(value: str) -> str:
    if ".." in value:
        raise ValueError("must not contain `..`")
    return value


def check_share_server(value: str) -> str:
    """A host name or IPv4 address: letters, digits, ``.`` and ``-``, at most 253 characters.

    Raises:
        ValueError: anything else (the message never repeats the value).
    """
    if not _SERVER.fullmatch(value):
        raise ValueError("must be a host name or IPv4 address: letters, digits, `.` and `-` only")
    return _no_climbing(value)


def check_share_path(value: str) -> str:
    """A share name or export path: segments of letters, digits, ``_ . -`` split by ``/``, no ``..``.

    Raises:
        ValueError: anything else, at most 255 characters.
    """
    if len(value) > 255 or not _PATH.fullmatch(value):
        raise ValueError("must be letters, digits and `_ . -` in segments split by `/`, at most 255")
    return _no_climbing(value)


def check_share_user(value: str) -> str:
    """An account on the share: letters, digits and ``_ . @ -``, at most 64 characters.

    Raises:
        ValueError: anything else.
    """
    if not _USER.fullmatch(value):
        raise ValueError("must be letters, digits and `_ . @ -` only, at most 64")
    return _no_climbing(value)


def check_share_domain(value: str) -> str:
    """A cifs domain or workgroup: letters, digits and ``_ . -``, at most 64 characters.

    Raises:
        ValueError: anything else.
    """
    if not _DOMAIN.fullmatch(value):
        raise ValueError("must be letters, digits and `_ . -` only, at most 64")
    return _no_climbing(value)


def check_share_version(value: str) -> str:
    """A protocol version that some kind offers (the kind's own list is checked on the model).

    Raises:
        ValueError: not one of the versions cifs or nfs know.
    """
    if not any(value in versions for versions in _VERSIONS.values()):
        raise ValueError(f"must be one of {sorted(set(_VERSIONS['cifs']) | set(_VERSIONS['nfs']))}")
    return value


def check_share_password(value: str) -> str:
    """The share's password: 1 to 256 printable characters (no control character, no newline).

    Raises:
        ValueError: empty, too long or not printable (the message never repeats the value).
    """
    if not value or len(value) > _MAX_PASSWORD:
        raise ValueError(f"must be 1 to {_MAX_PASSWORD} characters")
    if not value.isprintable():
        raise ValueError("must contain printable characters only")
    return value


class BackupShareSettings(WireModel):
    """A share as hostd stores and shows it: everything but the password.

    Attributes:
        kind: ``cifs`` or ``nfs``.
        server: the server's host name or IPv4 address.
        share: the cifs share (``backups`` or ``backups/mirbad``) or the nfs export (``/export/backups``).
        username: the cifs account (nfs has none).
        domain: the cifs domain or workgroup.
        version: the protocol version (cifs ``vers=``, nfs ``nfsvers=``); None lets mount negotiate.
    """

    kind: BackupShareKind
    server: Annotated[str, AfterValidator(check_share_server)]
    share: Annotated[str, AfterValidator(check_share_path)]
    username: Annotated[str, AfterValidator(check_share_user)] | None = None
    domain: Annotated[str, AfterValidator(check_share_domain)] | None = None
    version: Annotated[str, AfterValidator(check_share_version)] | None = None

    @field_validator("share")
    @classmethod
    def _share_fits_kind(cls, value: str, info: ValidationInfo) -> str:
        kind = info.data.get("kind")
        if kind == "nfs" and not value.startswith("/"):
            raise ValueError("an nfs export is an absolute path (`/export/backups`)")
        if kind == "cifs" and value.startswith("/"):
            raise ValueError("a cifs share is its name without a leading `/` (`backups`)")
        return value

    @field_validator("username", "domain")
    @classmethod
    def _cifs_only(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("kind") == "nfs":
            raise ValueError("nfs shares have no account; leave it out")
        return value

    @field_validator("version")
    @classmethod
    def _version_fits_kind(cls, value: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        if value is not None and kind in _VERSIONS and value not in _VERSIONS[kind]:
            raise ValueError(f"{kind} versions are {list(_VERSIONS[kind])}")
        return value


class BackupShare(BackupShareSettings):
    """``PUT /backup-mount`` and ``POST /backup-mount/test``: the share, with its password for cifs.

    Attributes:
        password: the cifs account's password; it goes to the credentials file only and is never
            returned, logged or part of ``repr``.
    """

    password: Annotated[str, AfterValidator(check_share_password)] | None = Field(default=None, repr=False)

    @field_validator("password")
    @classmethod
    def _password_is_cifs_only(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("kind") == "nfs":
            raise ValueError("nfs shares have no account; leave it out")
        return value

    @model_validator(mode="after")
    def _cifs_has_an_account(self) -> BackupShare:
        # mount.cifs asks on a terminal for whatever the credentials file lacks: hostd has none.
        if self.kind == "cifs" and self.username is None:
            raise InvalidFieldError("username", "a cifs share needs the account hostd mounts it as")
        if self.kind == "cifs" and self.password is None:
            raise InvalidFieldError("password", "a cifs share needs the account's password")
        return self

    def without_secret(self) -> BackupShareSettings:
        """The share as hostd stores and shows it."""
        return BackupShareSettings.model_validate(self.model_dump(exclude={"password"}))


class BackupShareProbe(WireModel):
    """``POST /backup-mount/test`` succeeded: the share mounted and a file was written, read and removed.

    Attributes:
        source: what was mounted (``//nas/backups``, ``nas:/export/backups``).
        fs_type: the file system type mounted.
        uid: the account the probe wrote as.
        gid: its group.
    """

    source: str
    fs_type: str
    uid: int
    gid: int


class BackupMountStatus(WireModel):
    """``GET /backup-mount`` (and the answer to ``PUT``): the configured share and the fixed target's mount.

    Attributes:
        target: the fixed folder the share is mounted at.
        unit: the mount unit hostd manages there.
        configured: whether hostd manages a share (its unit and state exist).
        share: the configured share, without its password.
        mounted: whether something is mounted at the target now (``/proc/self/mountinfo``).
        fs_type: the type of what is mounted there.
        source: the source of what is mounted there.
        network: whether that mount is a network file system (cifs, smb3, nfs, nfs4).
        free_bytes: free space at the target for an unprivileged writer; None when unknown.
        total_bytes: the size of the file system at the target; None when unknown.
        error: why the free space is unknown (a share that did not answer within the bound).
    """

    target: str
    unit: str
    configured: bool = False
    share: BackupShareSettings | None = None
    mounted: bool = False
    fs_type: str | None = None
    source: str | None = None
    network: bool = False
    free_bytes: int | None = None
    total_bytes: int | None = None
    error: str | None = None


class BackupMountRemoved(WireModel):
    """``DELETE /backup-mount``: the share's unit, credentials and state are gone.

    Attributes:
        unit: the unit that was disabled and removed.
        warnings: what the operator should still fix (the local folder not owned by the backup account).
    """

    unit: str
    warnings: list[str] = Field(default_factory=list)
