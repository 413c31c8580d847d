"""PKI building blocks: keys, PEM files on disk, SPKI pins and certificate identities.

Every key Mirbad creates is ECDSA on P-256: OpenSSL (hence Python's :mod:`ssl`) accepts it for both TLS
client and server authentication on every platform the agent runs on, and it is small and fast to sign
with. Private keys are written atomically with mode 0600 and refused on load when the group or others
can reach them, because a key that another account could read is no longer this machine's secret.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from .exceptions import InsecureKeyFileError, PkiError
from .support import write_bytes_atomic

__all__ = [
    "CertificateIdentity",
    "IpAddress",
    "PrivateKey",
    "certificate_identity",
    "certificates_from_pem",
    "certificates_to_pem",
    "generate_private_key",
    "private_key_from_pem",
    "private_key_to_pem",
    "read_certificates",
    "read_private_key",
    "spki_pin",
    "write_certificates",
    "write_private_key",
]

PrivateKey = ec.EllipticCurvePrivateKey
"""The private key type of every Mirbad identity (ECDSA; P-256 for the keys Mirbad creates)."""

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
"""An IP address a certificate may name in its subject alternative names."""

_PRIVATE_MODE: Final = 0o600
_PUBLIC_MODE: Final = 0o644
_ACCESS_BY_OTHERS: Final = stat.S_IRWXG | stat.S_IRWXO


@dataclass(frozen=True)
class CertificateIdentity:
    """Who a certificate names: its subject common name and its subject alternative names."""

    common_name: str | None
    dns_names: tuple[str, ...] = ()
    ip_addresses: tuple[IpAddress, ...] = ()


def generate_private_key() -> PrivateKey:
    """Create a new ECDSA P-256 private key."""
    return ec.generate_private_key(ec.SECP256R1())


def private_key_to_pem(key: PrivateKey) -> bytes:
    """Encode a private key as unencrypted PKCS#8 PEM (protected by file permissions, not a passphrase)."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def private_key_from_pem(data: bytes) -> PrivateKey:
    """Decode an unencrypted PEM private key, refusing anything that is not an elliptic-curve key.

    Raises:
        PkiError: the data is not a PEM private key, is encrypted, or is not an EC key.
    """
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise PkiError(f"not a usable PEM private key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PkiError(f"expected an elliptic-curve (ECDSA) private key, got {type(key).__name__}")
    return key


def certificates_to_pem(certificates: Iterable[x509.Certificate]) -> bytes:
    """Encode certificates as concatenated PEM blocks, in the order given."""
    return b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certificates)


def certificates_from_pem(data: bytes) -> list[x509.Certificate]:
    """Decode one or more concatenated PEM certificates, in file order.

    Raises:
        PkiError: the data holds no certificate or a malformed one.
    """
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise PkiError(f"not a PEM certificate: {exc}") from None
    return certificates


def write_private_key(path: Path, key: PrivateKey) -> None:
    """Write a private key as PEM, atomically and with mode 0600."""
    write_bytes_atomic(path, private_key_to_pem(key), mode=_PRIVATE_MODE)


def read_private_key(path: Path) -> PrivateKey:
    """Read a PEM private key, refusing a file that the group or others can reach (POSIX only).

    Raises:
        InsecureKeyFileError: the file's mode grants any access beyond its owner.
        PkiError: the file does not hold a usable key.
        OSError: the file cannot be read.
    """
    with path.open("rb") as handle:
        if os.name == "posix":
            mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
            if mode & _ACCESS_BY_OTHERS:
                raise InsecureKeyFileError(path, mode)
        data = handle.read()
    try:
        return private_key_from_pem(data)
    except PkiError as exc:
        raise PkiError(f"{path}: {exc}") from None


def write_certificates(path: Path, certificates: Iterable[x509.Certificate]) -> None:
    """Write certificates as PEM, atomically and world-readable (0644): certificates are public."""
    write_bytes_atomic(path, certificates_to_pem(certificates), mode=_PUBLIC_MODE)


def read_certificates(path: Path) -> list[x509.Certificate]:
    """Read the PEM certificates of a file, in file order.

    Raises:
        PkiError: the file holds no certificate or a malformed one.
        OSError: the file cannot be read.
    """
    try:
        return certificates_from_pem(path.read_bytes())
    except PkiError as exc:
        raise PkiError(f"{path}: {exc}") from None


def spki_pin(subject: x509.Certificate | x509.CertificateSigningRequest | PrivateKey) -> str:
    """Return the ``pin-sha256`` of a public key: base64 of the SHA-256 of its DER SubjectPublicKeyInfo.

    The pin names a key, not a certificate, so it survives the re-issue of a certificate for the
    same key (the HPKP convention, RFC 7469).
    """
    public_key = subject.public_key()
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode("ascii")


def certificate_identity(certificate: x509.Certificate) -> CertificateIdentity:
    """Read the common name and the DNS and IP subject alternative names of a certificate."""
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    common_name = str(names[0].value) if names else None
    try:
        san = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return CertificateIdentity(common_name)
    return CertificateIdentity(
        common_name,
        tuple(san.get_values_for_type(x509.DNSName)),
        # A SAN IPAddress may also hold a network (name constraints); an identity names hosts only.
        tuple(ip for ip in san.get_values_for_type(x509.IPAddress) if isinstance(ip, IpAddress)),
    )
