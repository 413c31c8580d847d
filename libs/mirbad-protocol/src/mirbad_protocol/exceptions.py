"""The exceptions of mirbad_protocol.

Every Mirbad library raises subclasses of :class:`MirbadError`, so a caller embedding several libraries
can catch one root. Errors about a single bad input name that input in :attr:`InvalidFieldError.field`,
using the wire (camelCase) spelling, so an HTTP layer can answer 400 with the field and a command line
can print it.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "CertificateRequestError",
    "ComputeAppsFormatError",
    "InsecureKeyFileError",
    "InvalidFieldError",
    "MirbadError",
    "MirbadProtocolError",
    "PinMismatchError",
    "PkiError",
]


class MirbadError(Exception):
    """Root of every exception a Mirbad library raises on purpose."""


class MirbadProtocolError(MirbadError):
    """Root of the exceptions of :mod:`mirbad_protocol`."""


class InvalidFieldError(MirbadProtocolError, ValueError):
    """A value that breaks a rule of the wire contract.

    Attributes:
        field: the offending field as it is spelled on the wire (``memoryBudgetGiB``,
            ``speculative.model``, ``extraArgs``), or a flag such as ``--max-num-seqs``.
        reason: what is wrong with it, without the field name.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class PkiError(MirbadProtocolError):
    """A key, certificate or certificate request that cannot be used, with the reason in the message."""


class InsecureKeyFileError(PkiError, PermissionError):
    """A private key file that accounts other than its owner can read or write.

    Attributes:
        path: the key file.
        mode: its permission bits.
    """

    def __init__(self, path: Path, mode: int) -> None:
        super().__init__(
            f"{path}: private key file has mode {mode:04o}, so the group or others can reach it; "
            f"restrict it with `chmod 600 {path}` and, if other accounts may have read it, issue a new key"
        )
        self.path = path
        self.mode = mode


class CertificateRequestError(PkiError, ValueError):
    """A CSR the CA refuses to certify: unreadable, badly signed, weak key, or a name it may not have."""


class PinMismatchError(PkiError):
    """A peer's CA is not the pinned one, or its certificate does not chain to the pinned CA."""


class ComputeAppsFormatError(MirbadProtocolError, ValueError):
    """nvidia-smi's compute-apps output has a row that is not ``pid, name, used MiB``."""
