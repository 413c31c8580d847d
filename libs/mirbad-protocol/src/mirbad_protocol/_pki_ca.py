"""The master's certificate authority: a self-signed CA that issues node and master certificates.

A node asks for its certificate with a certificate signing request (CSR) carrying its public key, its
node name and the DNS names and addresses it is reached at; the CA checks the request's signature and
copies the names only where the caller's :class:`SanPolicy` allows them. Every issued certificate serves
both ends of mutual TLS (serverAuth and clientAuth) unless it is the master's client-only certificate.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ._pki import (
    IpAddress,
    PrivateKey,
    read_certificates,
    read_private_key,
    spki_pin,
    write_certificates,
    write_private_key,
)
from ._pki_csr import ENROLL_LISTENER_NAME, SanPolicy, check_request_key, requested_names
from .exceptions import CertificateRequestError, PkiError

__all__ = [
    "CA_CERTIFICATE_FILE",
    "CA_KEY_FILE",
    "DEFAULT_CA_VALIDITY",
    "DEFAULT_LEAF_VALIDITY",
    "CertificateAuthority",
]

CA_CERTIFICATE_FILE: Final = "ca.crt"
"""The CA certificate's file name inside the folder given to :meth:`CertificateAuthority.save`."""
CA_KEY_FILE: Final = "ca.key"
"""The CA private key's file name inside the folder given to :meth:`CertificateAuthority.save`."""
DEFAULT_CA_VALIDITY: Final = timedelta(days=3650)
"""How long a new CA is valid: ten years, since replacing it means re-enrolling every node."""
DEFAULT_LEAF_VALIDITY: Final = timedelta(days=365)
"""How long an issued node or master certificate is valid unless the caller says otherwise."""

# Certificates start a little in the past so a peer whose clock runs behind still accepts them.
_CLOCK_SKEW: Final = timedelta(minutes=5)
_ACCEPTED_CURVES: Final = (ec.SECP256R1, ec.SECP384R1)


class CertificateAuthority:
    """A CA certificate with its private key; it issues the leaf certificates of a Mirbad fleet.

    Args:
        certificate: a CA certificate (basicConstraints CA:true) whose public key matches ``private_key``.
        private_key: the CA's signing key.

    Raises:
        PkiError: the certificate is not a CA or does not belong to the key.
    """

    def __init__(self, certificate: x509.Certificate, private_key: PrivateKey) -> None:
        if spki_pin(certificate) != spki_pin(private_key):
            raise PkiError("the CA certificate does not belong to the CA private key")
        if not _is_ca(certificate):
            raise PkiError("the CA certificate lacks basicConstraints CA:true")
        self._certificate = certificate
        self._private_key = private_key

    @property
    def certificate(self) -> x509.Certificate:
        """The self-signed CA certificate that peers trust."""
        return self._certificate

    @property
    def private_key(self) -> PrivateKey:
        """The CA's signing key (keep it on the master only)."""
        return self._private_key

    @property
    def pin(self) -> str:
        """The ``pin-sha256`` of the CA key, which nodes and the master pin."""
        return spki_pin(self._certificate)

    @classmethod
    def create(
        cls,
        common_name: str = "Mirbad CA",
        *,
        validity: timedelta = DEFAULT_CA_VALIDITY,
        now: datetime | None = None,
    ) -> CertificateAuthority:
        """Create a new P-256 key and a self-signed CA certificate for it (path length 0).

        Args:
            common_name: the CA's subject common name (a master id makes CAs of different fleets
                tell apart in logs).
            validity: how long the CA certificate is valid.
            now: the issue time (defaults to the current UTC time).
        """
        key = ec.generate_private_key(ec.SECP256R1())
        start = (now or datetime.now(UTC)) - _CLOCK_SKEW
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        identifier = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .add_extension(identifier, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(identifier), False)
        )
        return cls(builder.sign(key, hashes.SHA256()), key)

    @classmethod
    def load(cls, directory: Path) -> CertificateAuthority:
        """Read ``ca.crt`` and ``ca.key`` from ``directory``.

        Raises:
            InsecureKeyFileError: ``ca.key`` is reachable by the group or others.
            PkiError: a file does not hold what it should, or the two do not match.
            OSError: a file cannot be read.
        """
        key = read_private_key(directory / CA_KEY_FILE)
        return cls(read_certificates(directory / CA_CERTIFICATE_FILE)[0], key)

    def save(self, directory: Path) -> None:
        """Write ``ca.key`` (0600) and ``ca.crt`` (0644) into ``directory``, each atomically."""
        write_private_key(directory / CA_KEY_FILE, self._private_key)
        write_certificates(directory / CA_CERTIFICATE_FILE, [self._certificate])

    def issue_from_csr(
        self,
        request: x509.CertificateSigningRequest,
        *,
        policy: SanPolicy,
        common_name: str | None = None,
        validity: timedelta = DEFAULT_LEAF_VALIDITY,
        now: datetime | None = None,
    ) -> x509.Certificate:
        """Issue a node certificate (serverAuth only) for the key of a CSR.

        Node certificates cannot authenticate a TLS client: OpenSSL checks the clientAuth purpose on
        the agent's side, so only the master's certificate (:meth:`issue_client_certificate`) opens an
        agent, and one enrolled node can never drive another.

        Args:
            request: the node's CSR; its signature proves it holds the private key.
            policy: which of the requested DNS names and IP addresses may be certified.
            common_name: the subject to certify instead of the CSR's own common name (the master
                decides a node's identity, for example from its enrollment token).
            validity: how long the certificate is valid (never past the CA's own end).
            now: the issue time (defaults to the current UTC time).

        Raises:
            CertificateRequestError: a bad signature or key, no common name, or a refused name.
        """
        check_request_key(request)  # a corrupted key is the request's fault, not a crash of the CA
        if not request.is_signature_valid:
            raise CertificateRequestError("the CSR signature does not verify; it was altered or forged")
        public_key = request.public_key()
        if not isinstance(public_key, ec.EllipticCurvePublicKey) or not isinstance(
            public_key.curve, _ACCEPTED_CURVES
        ):
            raise CertificateRequestError("the CSR key must be ECDSA on P-256 or P-384")
        dns_names, ip_addresses = requested_names(request)
        policy.check(dns_names, ip_addresses)
        subject = common_name or _common_name(request.subject)
        if not subject:
            raise CertificateRequestError("the CSR has no common name (the node name)")
        builder = self._leaf_builder(public_key, subject, validity, now).add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        names = [x509.DNSName(name) for name in dns_names] + [x509.IPAddress(ip) for ip in ip_addresses]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(self._private_key, hashes.SHA256())

    def issue_enroll_listener_certificate(
        self,
        public_key: ec.EllipticCurvePublicKey,
        *,
        dns_names: Iterable[str] = (),
        ip_addresses: Iterable[IpAddress] = (),
        common_name: str = "mirbad-master",
        validity: timedelta = DEFAULT_LEAF_VALIDITY,
        now: datetime | None = None,
    ) -> x509.Certificate:
        """Issue the enroll listener's server certificate: serverAuth, with :data:`ENROLL_LISTENER_NAME`.

        The one way to a certificate carrying that name: :meth:`issue_from_csr` refuses it under
        every policy, so joining nodes that require it accept the master's listener and no node.

        Args:
            public_key: the public half of a key the master created itself.
            dns_names: the host names nodes use in ``--master`` (besides the reserved name).
            ip_addresses: the addresses nodes use in ``--master``.
            common_name: the certificate's subject common name.
            validity: how long the certificate is valid (never past the CA's own end).
            now: the issue time (defaults to the current UTC time).
        """
        names: list[x509.GeneralName] = [x509.DNSName(ENROLL_LISTENER_NAME)]
        names += [x509.DNSName(name) for name in dns_names if name.lower() != ENROLL_LISTENER_NAME]
        names += [x509.IPAddress(address) for address in ip_addresses]
        builder = (
            self._leaf_builder(public_key, common_name, validity, now)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
        )
        return builder.sign(self._private_key, hashes.SHA256())

    def issue_client_certificate(
        self,
        public_key: ec.EllipticCurvePublicKey,
        common_name: str,
        *,
        validity: timedelta = DEFAULT_LEAF_VALIDITY,
        now: datetime | None = None,
    ) -> x509.Certificate:
        """Issue a client-only certificate (clientAuth), such as the master's own for calling agents.

        Args:
            public_key: the public half of a key the caller created itself.
            common_name: the certificate's subject common name.
            validity: how long the certificate is valid (never past the CA's own end).
            now: the issue time (defaults to the current UTC time).
        """
        builder = self._leaf_builder(public_key, common_name, validity, now).add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        return builder.sign(self._private_key, hashes.SHA256())

    def _leaf_builder(
        self,
        public_key: ec.EllipticCurvePublicKey,
        common_name: str,
        validity: timedelta,
        now: datetime | None,
    ) -> x509.CertificateBuilder:
        start = (now or datetime.now(UTC)) - _CLOCK_SKEW
        end = min(start + validity, self._certificate.not_valid_after_utc)
        authority = self._certificate.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._certificate.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(authority), False)
        )


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    # A CA signs certificates (and would sign CRLs); a leaf only signs TLS handshakes.
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _is_ca(certificate: x509.Certificate) -> bool:
    try:
        return certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        return False


def _common_name(name: x509.Name) -> str | None:
    attributes = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attributes[0].value) if attributes else None
