"""The backup document: what a backup file holds, version by version.

Version 2 (what this master writes) is a fleet's: the master's identity, the models, the nodes'
non-secret records, the host services of the master and of each node, and optionally an encrypted
section. Version 1 (a single machine's, read only) has the models, the host services and optionally
the encrypted section with the API keys.

A backup is a person's file, so reading it refuses an unknown field (naming it) instead of skipping it
the way the wire contract between our own processes does; see :mod:`._format`.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Final, Literal

from pydantic import AwareDatetime, BeforeValidator, Field, PlainSerializer

from mirbad_orchestration.fleet import MasterIdentity, NodeRecord
from mirbad_orchestration.services import HostServicesDocument
from mirbad_protocol import ModelDefinition, PkiError, WireModel
from mirbad_protocol.admin import ApiKeyRecord
from mirbad_protocol.pki import (
    CertificateAuthority,
    certificates_from_pem,
    certificates_to_pem,
    private_key_from_pem,
    private_key_to_pem,
)

__all__ = [
    "BACKUP_SCHEMA_VERSION",
    "KDF_ITERATIONS",
    "MAX_KDF_ITERATIONS",
    "BackupDocument",
    "BackupDocumentV1",
    "BackupDocumentV2",
    "BackupSecrets",
    "CipherParameters",
    "EncryptedSecrets",
    "FleetCaBackup",
    "HostServicesBackup",
    "KdfParameters",
    "MasterIdentity",
]

BACKUP_SCHEMA_VERSION: Final = 2
"""The schema version this master writes."""

KDF_ITERATIONS: Final = 600_000
"""PBKDF2-SHA256 iterations: what this master writes and the least it accepts when reading."""

MAX_KDF_ITERATIONS: Final = 10_000_000
"""The most iterations a backup may ask for: beyond that, opening a crafted file would tie up a CPU."""

SALT_BYTES: Final = 16
NONCE_BYTES: Final = 12


def _decode_base64(value: object) -> object:
    if not isinstance(value, str):
        return value  # pydantic names the wrong type
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not standard base64") from None


def _encode_base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


Base64 = Annotated[bytes, BeforeValidator(_decode_base64), PlainSerializer(_encode_base64, return_type=str)]
"""Bytes carried as standard base64 text (padded, no line breaks)."""

HostName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[^\x00-\x1f\x7f]+$")]


class HostServicesBackup(WireModel):
    """The host services of a fleet.

    Attributes:
        master: the master's container whitelist and remembered restart policies.
        nodes: per node id, what that node keeps of its own.
    """

    master: HostServicesDocument = Field(default_factory=HostServicesDocument)
    nodes: dict[str, HostServicesDocument] = Field(default_factory=dict)


class FleetCaBackup(WireModel):
    """The fleet's certificate authority, as PEM text.

    Attributes:
        certificate_pem: the CA certificate.
        private_key_pem: its private key (unencrypted PEM: the section around it is what protects it).
    """

    certificate_pem: Annotated[str, Field(min_length=1)]
    private_key_pem: Annotated[str, Field(min_length=1)]

    @classmethod
    def of(cls, authority: CertificateAuthority) -> FleetCaBackup:
        """The backup form of the fleet's CA."""
        return cls(
            certificate_pem=certificates_to_pem([authority.certificate]).decode("ascii"),
            private_key_pem=private_key_to_pem(authority.private_key).decode("ascii"),
        )

    def authority(self) -> CertificateAuthority:
        """The CA again, checked: a CA certificate that belongs to the key.

        Raises:
            PkiError: the PEM text does not hold a matching CA certificate and key.
        """
        certificates = certificates_from_pem(self.certificate_pem.encode("utf-8"))
        if len(certificates) != 1:
            raise PkiError(f"the backup's CA holds {len(certificates)} certificates, not one")
        return CertificateAuthority(
            certificates[0], private_key_from_pem(self.private_key_pem.encode("utf-8"))
        )


class BackupSecrets(WireModel):
    """The plaintext of the encrypted section.

    Attributes:
        api_keys: the API key records (hashes, limits, expiry), so the old keys authenticate again.
        ca: the fleet CA; absent when the backup was written without it (or by a single machine).
        share_password: the password of the backup destination's share, if one is configured.
    """

    api_keys: list[ApiKeyRecord] = Field(default_factory=list)
    ca: FleetCaBackup | None = None
    share_password: str | None = None


class KdfParameters(WireModel):
    """How the section's key is derived from the passphrase.

    Attributes:
        algorithm: always ``pbkdf2-sha256`` (a 32-byte key).
        iterations: the PBKDF2 iteration count (at least :data:`KDF_ITERATIONS` to be opened).
        salt: the random salt (at least 16 bytes to be opened).
    """

    algorithm: Literal["pbkdf2-sha256"]
    iterations: Annotated[int, Field(ge=1, le=MAX_KDF_ITERATIONS, strict=True)]
    salt: Base64


class CipherParameters(WireModel):
    """The cipher of the section.

    Attributes:
        algorithm: always ``aes-256-gcm``.
        nonce: the 12-byte GCM nonce.
    """

    algorithm: Literal["aes-256-gcm"]
    nonce: Annotated[Base64, Field(min_length=NONCE_BYTES, max_length=NONCE_BYTES)]


class EncryptedSecrets(WireModel):
    """The encrypted section as the file carries it.

    Attributes:
        kdf: the key derivation.
        cipher: the cipher and its nonce.
        ciphertext: the encrypted :class:`BackupSecrets` JSON followed by GCM's 16-byte tag.
    """

    kdf: KdfParameters
    cipher: CipherParameters
    ciphertext: Annotated[Base64, Field(min_length=16)]


class BackupDocumentV2(WireModel):
    """A fleet's backup (schema version 2, what this master writes).

    Attributes:
        schema_version: 2.
        created_at: when it was written.
        host: the master's host name (also in the file's name).
        master: the master's identity (only fleet recovery restores it).
        models: the model definitions, placements included.
        nodes: the nodes' non-secret records (only fleet recovery restores them).
        host_services: the host services of the master and of each node.
        secrets: the encrypted section; absent when written without a passphrase.
    """

    schema_version: Literal[2]
    created_at: AwareDatetime
    host: HostName
    master: MasterIdentity
    models: list[ModelDefinition] = Field(default_factory=list)
    nodes: list[NodeRecord] = Field(default_factory=list)
    host_services: HostServicesBackup = Field(default_factory=HostServicesBackup)
    secrets: EncryptedSecrets | None = None


class BackupDocumentV1(WireModel):
    """A single machine's backup (schema version 1, read only).

    Attributes:
        schema_version: 1.
        created_at: when it was written.
        host: the machine's host name, when recorded.
        models: the model definitions (without placements: a restore puts them on the bootstrap node).
        host_services: the machine's container whitelist and restart policies.
        secrets: the encrypted section (API keys only); absent when written without a passphrase.
    """

    schema_version: Literal[1]
    created_at: AwareDatetime
    host: HostName | None = None
    models: list[ModelDefinition] = Field(default_factory=list)
    host_services: HostServicesDocument = Field(default_factory=HostServicesDocument)
    secrets: EncryptedSecrets | None = None


BackupDocument = BackupDocumentV1 | BackupDocumentV2
"""A backup of either readable version."""
