"""Writing a backup document to bytes, and reading one back.

:func:`encode_backup` writes schema version 2 from a :class:`BackupContents` the master composes;
:func:`parse_backup` reads version 1 or 2 and refuses anything else before a passphrase is tried; and
:func:`open_secrets` opens the encrypted section, whole or not at all.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import ValidationError

from mirbad_orchestration.exceptions import BackupFormatError, BackupNotEncryptedError, BackupVersionError
from mirbad_orchestration.fleet import NodeRecord
from mirbad_protocol import ModelDefinition, field_error_from_validation

from ._crypto import Entropy, associated_data, check_kdf, decrypt_secrets, encrypt_secrets
from ._document import (
    BACKUP_SCHEMA_VERSION,
    BackupDocument,
    BackupDocumentV1,
    BackupDocumentV2,
    BackupSecrets,
    HostServicesBackup,
    MasterIdentity,
)

__all__ = ["Backup", "BackupContents", "encode_backup", "open_secrets", "parse_backup"]

_DOCUMENT = "(document)"
_VERSIONS: dict[int, type[BackupDocumentV1] | type[BackupDocumentV2]] = {
    1: BackupDocumentV1,
    2: BackupDocumentV2,
}


@dataclass(frozen=True)
class BackupContents:
    """What the master hands over to be backed up (it composes this from its stores).

    Attributes:
        master: the master's identity.
        models: the model definitions.
        nodes: the nodes' records.
        host_services: the host services of the master and of each node.
        secrets: the secrets, when a passphrase backup was asked for; never written without one.
    """

    master: MasterIdentity
    models: Sequence[ModelDefinition] = ()
    nodes: Sequence[NodeRecord] = ()
    host_services: HostServicesBackup = field(default_factory=HostServicesBackup)
    secrets: BackupSecrets | None = None


@dataclass(frozen=True)
class Backup:
    """A backup document read from a file, not yet opened.

    Attributes:
        document: the document (version 1 or 2); its ``secrets`` is still encrypted.
        associated_data: what the encrypted section is bound to (see :mod:`._crypto`).
    """

    document: BackupDocument
    associated_data: bytes = field(repr=False)

    @property
    def schema_version(self) -> int:
        """The document's schema version."""
        return self.document.schema_version

    @property
    def encrypted(self) -> bool:
        """Whether the document has an encrypted section (it was written with a passphrase)."""
        return self.document.secrets is not None


def encode_backup(
    contents: BackupContents,
    *,
    host: str,
    created_at: datetime,
    passphrase: str | None = None,
    include_ca: bool = True,
    entropy: Entropy = os.urandom,
) -> bytes:
    """Write a schema version 2 document (indented UTF-8 JSON ending in a newline).

    Args:
        contents: what to back up.
        host: the master's host name.
        created_at: when (timezone-aware).
        passphrase: encrypts ``contents.secrets`` (an empty section when there are none); without one
            the secrets are left out entirely.
        include_ca: whether the fleet CA goes into the encrypted section.
        entropy: the source of the salt and the nonce.

    Raises:
        BackupPassphraseTooShortError: the passphrase is too short.
    """
    document = BackupDocumentV2(
        schema_version=BACKUP_SCHEMA_VERSION,
        created_at=created_at,
        host=host,
        master=contents.master,
        models=list(contents.models),
        nodes=list(contents.nodes),
        host_services=contents.host_services,
    ).to_wire()
    if passphrase is not None:
        secrets = contents.secrets or BackupSecrets()
        if not include_ca:
            secrets = secrets.model_copy(update={"ca": None})
        encrypt_secrets(secrets, passphrase, document, entropy=entropy)
    return (json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def parse_backup(raw: bytes | str) -> Backup:
    """Read a backup document (schema version 1 or 2) without opening its encrypted section.

    Raises:
        BackupFormatError: not JSON, not an object, a wrong or unknown field (named).
        BackupVersionError: a schema version other than 1 and 2.
        WeakBackupKdfError: the encrypted section's key derivation is weaker than this master's.
    """
    data = _load_json(raw)
    version = data.get("schemaVersion")
    model = _VERSIONS.get(version) if type(version) is int else None
    if model is None:
        raise BackupVersionError(version)
    try:
        document: BackupDocument = model.model_validate(data, extra="forbid")
    except ValidationError as exc:
        error = field_error_from_validation(exc, model=model)
        raise BackupFormatError(error.field, error.reason) from None
    if document.secrets is not None:
        check_kdf(document.secrets)
    return Backup(document, associated_data(data))


def open_secrets(backup: Backup, passphrase: str) -> BackupSecrets:
    """Open a backup's encrypted section with its passphrase.

    Raises:
        BackupNotEncryptedError: the backup has no encrypted section.
        BackupPassphraseError: the passphrase is wrong or the backup was altered (nothing is returned).
        BackupFormatError: the section opened but does not hold secrets this master reads.
    """
    if backup.document.secrets is None:
        raise BackupNotEncryptedError()
    return decrypt_secrets(backup.document.secrets, passphrase, backup.associated_data)


def _load_json(raw: bytes | str) -> dict[str, object]:
    try:
        data = json.loads(raw, parse_constant=_refuse_constant, parse_float=_finite_float)
    except UnicodeDecodeError:
        raise BackupFormatError(_DOCUMENT, "not UTF-8 text") from None
    except ValueError as exc:
        raise BackupFormatError(_DOCUMENT, f"not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BackupFormatError(_DOCUMENT, f"a backup is a JSON object, not {type(data).__name__}")
    return data


def _refuse_constant(name: str) -> object:
    # NaN and the infinities are not JSON; Python's reader takes them unless told otherwise.
    raise ValueError(f"{name} is not a JSON value")


def _finite_float(text: str) -> float:
    # 1e400 reads as infinity, which no field takes and the canonical form cannot carry.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range")
    return value
