"""The encrypted section: AES-256-GCM under a key derived from the passphrase with PBKDF2-SHA256.

The associated data is the whole document except the ciphertext itself, in a canonical JSON form
(sorted keys, no spaces, ASCII), after a prefix naming the schema version. So the section is bound to
its document: changing the version, the header (time, host), the KDF parameters, the nonce, the salt or
any plaintext section (a model, a node) makes it refuse to open, and it cannot be moved into another
backup. Only whitespace and key order may change, since JSON does not give them a meaning.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC
from pydantic import ValidationError

from mirbad_orchestration.exceptions import (
    BackupFormatError,
    BackupPassphraseError,
    BackupPassphraseTooShortError,
    WeakBackupKdfError,
)
from mirbad_protocol import field_error_from_validation

from ._document import (
    KDF_ITERATIONS,
    NONCE_BYTES,
    SALT_BYTES,
    BackupSecrets,
    CipherParameters,
    EncryptedSecrets,
    KdfParameters,
)

__all__ = ["MIN_PASSPHRASE_LENGTH", "Entropy", "check_passphrase"]

MIN_PASSPHRASE_LENGTH: Final = 12
"""The shortest passphrase a backup is encrypted with."""

_KEY_BYTES: Final = 32

Entropy = Callable[[int], bytes]
"""Where salts and nonces come from: ``os.urandom``; a test passes fixed bytes for a snapshot."""


def check_passphrase(passphrase: str) -> str:
    """Return ``passphrase`` if it is long enough to encrypt a backup with.

    Raises:
        BackupPassphraseTooShortError: it has fewer than :data:`MIN_PASSPHRASE_LENGTH` characters.
    """
    if len(passphrase) < MIN_PASSPHRASE_LENGTH:
        raise BackupPassphraseTooShortError(
            "passphrase", f"must have at least {MIN_PASSPHRASE_LENGTH} characters"
        )
    return passphrase


def associated_data(document: Mapping[str, object]) -> bytes:
    """The AEAD's associated data for a decoded document (with or without its ciphertext)."""
    header = copy.deepcopy(dict(document))
    section = header.get("secrets")
    if isinstance(section, dict):
        section.pop("ciphertext", None)
    canonical = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return f"mirbad-backup\nschemaVersion={header.get('schemaVersion')!r}\n".encode(
        "ascii"
    ) + canonical.encode("ascii")


def encrypt_secrets(
    secrets: BackupSecrets,
    passphrase: str,
    document: dict[str, object],
    *,
    entropy: Entropy = os.urandom,
) -> None:
    """Encrypt ``secrets`` into ``document`` (a decoded document without a ``secrets`` key), in place.

    The KDF and cipher parameters are written first, then the ciphertext over the whole document.

    Raises:
        BackupPassphraseTooShortError: the passphrase is too short.
    """
    check_passphrase(passphrase)
    kdf = KdfParameters(algorithm="pbkdf2-sha256", iterations=KDF_ITERATIONS, salt=entropy(SALT_BYTES))
    cipher = CipherParameters(algorithm="aes-256-gcm", nonce=entropy(NONCE_BYTES))
    section: dict[str, object] = {"kdf": kdf.to_wire(), "cipher": cipher.to_wire()}
    document["secrets"] = section
    plaintext = secrets.model_dump_json(by_alias=True, exclude_defaults=True).encode("utf-8")
    sealed = AESGCM(_derive_key(passphrase, kdf)).encrypt(cipher.nonce, plaintext, associated_data(document))
    section["ciphertext"] = EncryptedSecrets(kdf=kdf, cipher=cipher, ciphertext=sealed).to_wire()[
        "ciphertext"
    ]


def check_kdf(section: EncryptedSecrets) -> None:
    """Refuse an encrypted section whose key derivation is weaker than the one this master writes.

    Raises:
        WeakBackupKdfError: too few iterations or too short a salt.
    """
    if section.kdf.iterations < KDF_ITERATIONS:
        raise WeakBackupKdfError(
            "secrets.kdf.iterations", f"{section.kdf.iterations} is fewer than the {KDF_ITERATIONS} required"
        )
    if len(section.kdf.salt) < SALT_BYTES:
        raise WeakBackupKdfError("secrets.kdf.salt", f"shorter than {SALT_BYTES} bytes")


def decrypt_secrets(section: EncryptedSecrets, passphrase: str, aad: bytes) -> BackupSecrets:
    """Open an encrypted section whose KDF :func:`check_kdf` accepted.

    Raises:
        BackupPassphraseError: wrong passphrase or altered backup; nothing of the section is returned.
        BackupFormatError: the section opened but does not hold secrets this master reads.
    """
    key = _derive_key(passphrase, section.kdf)
    try:
        plaintext = AESGCM(key).decrypt(section.cipher.nonce, section.ciphertext, aad)
    except InvalidTag:
        raise BackupPassphraseError() from None
    try:
        return BackupSecrets.model_validate_json(plaintext, extra="forbid")
    except ValidationError as exc:
        # Authentic but unreadable: a writer this master does not understand. Still no partial data.
        error = field_error_from_validation(exc, model=BackupSecrets)
        raise BackupFormatError(f"secrets.{error.field}", error.reason) from None


def _derive_key(passphrase: str, kdf: KdfParameters) -> bytes:
    derivation = PBKDF2HMAC(
        algorithm=hashes.SHA256(), length=_KEY_BYTES, salt=kdf.salt, iterations=kdf.iterations
    )
    return derivation.derive(passphrase.encode("utf-8", "surrogatepass"))
