"""Mutual-TLS contexts and peer checks between the master and its agents.

Both ends trust the fleet's CA and nothing else: the system trust store is never loaded, so a
certificate from a public CA (or from another Mirbad master) is refused just like a self-signed one.
The agent's server context requires a client certificate; the master's client context checks the
agent's name or address against the certificate's subject alternative names.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509
from cryptography.x509 import verification

from ._pki import (
    PrivateKey,
    certificates_from_pem,
    certificates_to_pem,
    private_key_from_pem,
    private_key_to_pem,
    read_certificates,
    read_private_key,
    spki_pin,
    write_certificates,
    write_private_key,
)
from .exceptions import PinMismatchError, PkiError

__all__ = [
    "CertificatesSource",
    "KeySource",
    "TlsCredentials",
    "client_context",
    "peer_certificate",
    "server_context",
    "verify_pinned_chain",
]

CertificatesSource = x509.Certificate | Sequence[x509.Certificate] | bytes | Path
"""Certificates given as objects, PEM bytes, or a PEM file (a chain, or several CAs during a rotation)."""
KeySource = PrivateKey | bytes | Path
"""A private key given as an object, PEM bytes, or a PEM file (whose permissions are checked)."""


# The Web PKI profile wants a subjectAltName on every end entity; a Mirbad client (the master) is
# named by its common name alone, so the client check lets the extension be absent.
_CA_POLICY = verification.ExtensionPolicy.webpki_defaults_ca()
_CLIENT_POLICY = verification.ExtensionPolicy.webpki_defaults_ee().may_be_present(
    x509.SubjectAlternativeName, verification.Criticality.AGNOSTIC, None
)


@dataclass(frozen=True)
class TlsCredentials:
    """A TLS identity (certificate and key) with the CA certificates it trusts for its peers.

    Attributes:
        certificate: this side's certificate, issued by the fleet's CA.
        private_key: the key of ``certificate``.
        ca_certificates: the CA certificates a peer must chain to (one, or two during a rotation).
    """

    certificate: x509.Certificate
    private_key: PrivateKey
    ca_certificates: tuple[x509.Certificate, ...]

    def __post_init__(self) -> None:
        if spki_pin(self.certificate) != spki_pin(self.private_key):
            raise PkiError("the certificate does not belong to the private key")

    @classmethod
    def load(cls, directory: Path, stem: str) -> TlsCredentials:
        """Read ``{stem}.crt``, ``{stem}.key`` (refused unless 0600 on POSIX) and ``{stem}-ca.crt``."""
        key = read_private_key(directory / f"{stem}.key")
        certificate = read_certificates(directory / f"{stem}.crt")[0]
        return cls(certificate, key, tuple(read_certificates(directory / f"{stem}-ca.crt")))

    def save(self, directory: Path, stem: str) -> None:
        """Write ``{stem}.key`` (0600), ``{stem}.crt`` and ``{stem}-ca.crt`` (0644), each atomically."""
        write_private_key(directory / f"{stem}.key", self.private_key)
        write_certificates(directory / f"{stem}.crt", [self.certificate])
        write_certificates(directory / f"{stem}-ca.crt", self.ca_certificates)

    def server_context(self) -> ssl.SSLContext:
        """A server context that requires a client certificate from one of :attr:`ca_certificates`."""
        return server_context(self.certificate, self.private_key, self.ca_certificates)

    def client_context(self) -> ssl.SSLContext:
        """A client context that presents :attr:`certificate` and trusts only :attr:`ca_certificates`."""
        return client_context(self.certificate, self.private_key, self.ca_certificates)


def server_context(certificate: CertificatesSource, key: KeySource, ca: CertificatesSource) -> ssl.SSLContext:
    """Build a TLS 1.2+ server context that requires and verifies a client certificate against ``ca`` only.

    Raises:
        InsecureKeyFileError: ``key`` is a file that the group or others can reach.
        PkiError: the material is unreadable or the certificate does not belong to the key.
    """
    context = _context(server=True, certificate=certificate, key=key, ca=ca)
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_context(certificate: CertificatesSource, key: KeySource, ca: CertificatesSource) -> ssl.SSLContext:
    """Build a TLS 1.2+ client context that presents a certificate and trusts servers from ``ca`` only.

    Hostname checking is on: connect with ``server_hostname`` set to the agent's DNS name or address,
    which must be one of its certificate's subject alternative names.

    Raises:
        InsecureKeyFileError: ``key`` is a file that the group or others can reach.
        PkiError: the material is unreadable or the certificate does not belong to the key.
    """
    context = _context(server=False, certificate=certificate, key=key, ca=ca)
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def peer_certificate(connection: ssl.SSLSocket | ssl.SSLObject) -> x509.Certificate | None:
    """Return the certificate the peer presented on a completed handshake, or ``None`` if it sent none."""
    der = connection.getpeercert(binary_form=True)
    return x509.load_der_x509_certificate(der) if der else None


def verify_pinned_chain(
    chain: Sequence[x509.Certificate],
    ca: x509.Certificate,
    pin: str,
    *,
    now: datetime | None = None,
    server_name: str | None = None,
) -> None:
    """Check that ``ca`` has the pinned key and that ``chain`` (leaf first) is valid under it.

    Used where a CA arrives over a channel not yet trusted (an enrollment answer) and the expected
    ``pin-sha256`` came from the operator. Without ``server_name`` the leaf is checked as a TLS client
    certificate; with it, as a server certificate for that DNS name or address.

    Raises:
        PinMismatchError: the CA key is not the pinned one, or the chain does not verify under it.
    """
    if not hmac.compare_digest(spki_pin(ca).encode("ascii"), pin.encode("ascii", "replace")):
        raise PinMismatchError(f"the CA key's pin is {spki_pin(ca)}, not the pinned {pin}")
    if not chain:
        raise PinMismatchError("the peer presented no certificate")
    builder = verification.PolicyBuilder().store(verification.Store([ca])).time(now or datetime.now(UTC))
    try:
        if server_name is None:
            builder = builder.extension_policies(ca_policy=_CA_POLICY, ee_policy=_CLIENT_POLICY)
            builder.build_client_verifier().verify(chain[0], list(chain[1:]))
        else:
            builder.build_server_verifier(_subject(server_name)).verify(chain[0], list(chain[1:]))
    except verification.VerificationError as exc:
        raise PinMismatchError(f"the certificate does not verify under the pinned CA: {exc}") from None


def _context(
    *, server: bool, certificate: CertificatesSource, key: KeySource, ca: CertificatesSource
) -> ssl.SSLContext:
    key_pem = _key_pem(key)  # first: an exposed key file is refused before anything else is read
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # Strict RFC 5280 checks, as Python 3.13's default contexts do; our certificates are built for them.
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    context.load_verify_locations(cadata=_certificates_pem(ca).decode("ascii"))
    _load_identity(context, _certificates_pem(certificate), key_pem)
    return context


def _load_identity(context: ssl.SSLContext, chain_pem: bytes, key_pem: bytes) -> None:
    # The ssl module reads a certificate chain and key only from files: stage them in a folder that
    # only this account can enter (mkdtemp makes it 0700) and remove them right after loading.
    with tempfile.TemporaryDirectory(prefix="mirbad-tls-") as folder:
        chain_path, key_path = os.path.join(folder, "chain.pem"), os.path.join(folder, "key.pem")
        with open(chain_path, "wb") as handle:
            handle.write(chain_pem)
        descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(key_pem)
        try:
            context.load_cert_chain(chain_path, key_path)
        except ssl.SSLError as exc:
            raise PkiError(f"the certificate and key cannot be used together: {exc.reason or exc}") from None


def _certificates_pem(source: CertificatesSource) -> bytes:
    if isinstance(source, x509.Certificate):
        return certificates_to_pem([source])
    if isinstance(source, Path):
        return certificates_to_pem(read_certificates(source))
    if isinstance(source, bytes):
        return certificates_to_pem(certificates_from_pem(source))
    return certificates_to_pem(source)


def _key_pem(source: KeySource) -> bytes:
    if isinstance(source, Path):
        return private_key_to_pem(read_private_key(source))
    if isinstance(source, bytes):
        return private_key_to_pem(private_key_from_pem(source))
    return private_key_to_pem(source)


def _subject(server_name: str) -> verification.Subject:
    try:
        return x509.IPAddress(ipaddress.ip_address(server_name))
    except ValueError:
        return x509.DNSName(server_name)
