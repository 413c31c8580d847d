"""The exceptions of mirbad_hostd; their HTTP mapping lives in ``_errors.py`` alone.

The tree of its exceptions, each under its first base here (one with more bases names them all)::

    HostdError(MirbadError)
    ├── HostdStartupError
    │   └── InsecureHostdFileError
    ├── UnitDeniedError
    ├── ServiceNotFoundError
    ├── ServiceExistsError
    ├── UnitUnavailableError
    ├── ConfirmationRequiredError
    ├── SystemctlError
    │   └── ActionFailedError
    ├── GpuQueryError
    └── BackupMountError
        ├── BackupMountConflictError
        ├── MountProbeError
        ├── MountBusyError
        └── BackupMountNotConfiguredError
"""

from __future__ import annotations

from pathlib import Path

from mirbad_protocol import MirbadError

__all__ = [
    "ActionFailedError",
    "BackupMountConflictError",
    "BackupMountError",
    "BackupMountNotConfiguredError",
    "ConfirmationRequiredError",
    "GpuQueryError",
    "HostdError",
    "HostdStartupError",
    "InsecureHostdFileError",
    "MountBusyError",
    "MountProbeError",
    "ServiceExistsError",
    "ServiceNotFoundError",
    "SystemctlError",
    "UnitDeniedError",
    "UnitUnavailableError",
]


class HostdError(MirbadError):
    """Root of the exceptions of :mod:`mirbad_hostd`."""


class HostdStartupError(HostdError):
    """hostd cannot start: a setting, a file or the socket is not usable (one line for the operator)."""


class InsecureHostdFileError(HostdStartupError):
    """A file hostd trusts (deny list, whitelist, seed) is not root-owned or is group/other-writable.

    Attributes:
        path: the file (or its folder).
    """

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}; hostd refuses to start until it is root-owned and go-w")
        self.path = path


class UnitDeniedError(HostdError):
    """The unit matches the hard deny list, or is an instance of a template the whitelist lacks.

    Attributes:
        unit: the unit (or name) refused.
        pattern: the deny pattern it matched (``*@*`` for an instance of a template not whitelisted).
    """

    def __init__(self, unit: str, pattern: str, *, template: str | None = None) -> None:
        if template is None:
            message = f"{unit} is a system service hostd never manages (deny pattern {pattern!r})"
        else:
            message = f"{unit} is an instance of {template}, which is not on the whitelist"
        super().__init__(message)
        self.unit = unit
        self.pattern = pattern


class ServiceNotFoundError(HostdError):
    """No whitelist entry of that name (nothing runs for an unknown name)."""


class ServiceExistsError(HostdError):
    """The whitelist already has an entry of that name."""


class UnitUnavailableError(HostdError):
    """The unit to add is not loaded with a unit file on that manager."""


class ConfirmationRequiredError(HostdError):
    """A protected service's stop, restart or autostart-off (or an unprotect) without its typed name."""


class SystemctlError(HostdError):
    """systemctl could not be run, timed out, or printed what hostd cannot read."""


class ActionFailedError(SystemctlError):
    """systemctl exited non-zero for an action (its stderr is in the message)."""


class GpuQueryError(HostdError):
    """nvidia-smi failed, hung, is missing or printed unreadable rows."""


class BackupMountError(HostdError):
    """The backup share could not be tested, applied or removed."""


class BackupMountConflictError(BackupMountError):
    """The target has a mount unit or automount hostd did not write, or a mount it did not make."""


class MountProbeError(BackupMountError):
    """The share did not mount, or the backup account could not write, read and delete a file on it."""


class MountBusyError(BackupMountError):
    """The share could not be unmounted (something uses it); nothing was removed."""


class BackupMountNotConfiguredError(BackupMountError):
    """No backup share is managed by hostd, so there is nothing to remove."""
