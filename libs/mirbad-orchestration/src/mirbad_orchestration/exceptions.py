"""The exceptions of mirbad_orchestration."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from mirbad_protocol import InvalidFieldError, MirbadError

__all__ = [
    "DuplicateServedNameError",
    "EnrollmentError",
    "EnrollmentStoreError",
    "EnrollmentTokenError",
    "EnrollmentTokenExpiredError",
    "EnrollmentTokenUsedError",
    "MirbadOrchestrationError",
    "RegistryError",
    "UnknownEnrollmentTokenError",
    "UnknownModelError",
    "UnreadableFlagError",
]


class MirbadOrchestrationError(MirbadError):
    """Root of the exceptions of :mod:`mirbad_orchestration`."""


class UnreadableFlagError(InvalidFieldError, MirbadOrchestrationError):
    """An owned flag in a command line or in ``extraArgs`` whose value cannot be read.

    ``field`` is the flag as written (``--max-num-seqs``, ``--speculative-config.num_speculative_tokens``).
    """


class RegistryError(MirbadOrchestrationError):
    """The registry file cannot be read or written."""


class UnknownModelError(MirbadOrchestrationError, KeyError):
    """No model with that id is registered."""

    def __init__(self, model_id: str) -> None:
        super().__init__(model_id)
        self.model_id = model_id

    def __str__(self) -> str:
        return f"no model with id {self.model_id!r}"


class DuplicateServedNameError(InvalidFieldError, MirbadOrchestrationError):
    """Another model already serves under that name (compared case-insensitively)."""

    def __init__(self, served_name: str, owner_id: str) -> None:
        super().__init__("servedName", f"{served_name!r} is already served by model {owner_id!r}")
        self.served_name = served_name
        self.owner_id = owner_id


class EnrollmentError(MirbadOrchestrationError):
    """Root of the errors of node enrollment on the master."""


class EnrollmentStoreError(EnrollmentError):
    """The enrollment token file cannot be read or written.

    Attributes:
        path: the token file.
        reason: what is wrong with it.
    """

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class EnrollmentTokenError(EnrollmentError):
    """An enrollment token the master refuses; the node needs a new token from the operator."""


class UnknownEnrollmentTokenError(EnrollmentTokenError):
    """A token this master never issued: mistyped, forged, meant for another master, or long expired."""

    def __init__(self) -> None:
        super().__init__(
            "enrollment token not recognised: this master did not issue it (check for a typing mistake "
            "or the wrong master URL) or it was pruned long after expiring; ask for a new token"
        )


class EnrollmentTokenUsedError(EnrollmentTokenError):
    """A token that already enrolled a node: every token enrolls exactly once.

    Attributes:
        node_name: the node the token was issued for.
        used_at: when it was redeemed.
    """

    def __init__(self, node_name: str, used_at: datetime) -> None:
        super().__init__(
            f"enrollment token for node {node_name!r} was already used at {used_at.isoformat()}; "
            "a token enrolls once, so ask for a new token"
        )
        self.node_name = node_name
        self.used_at = used_at


class EnrollmentTokenExpiredError(EnrollmentTokenError):
    """A token presented after its expiry.

    Attributes:
        node_name: the node the token was issued for.
        expired_at: when it stopped being valid.
    """

    def __init__(self, node_name: str, expired_at: datetime) -> None:
        super().__init__(
            f"enrollment token for node {node_name!r} expired at {expired_at.isoformat()}; "
            "ask for a new token"
        )
        self.node_name = node_name
        self.expired_at = expired_at
